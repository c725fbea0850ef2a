/* Crash-safe checkpoints, proved: a child process saves checkpoint B over checkpoint A and is killed
   with SIGKILL at every point of the save - after each chunk handed to the system, before and after
   the fsync, before and after the rename, after the directory's fsync (MF__SAVE_HOOK, defined here
   before the implementation) - and at random moments of a loop of saves; after every kill the file
   must be exactly A or exactly B (byte for byte) and load, and the stale .tmp must not hurt the next
   save. The same for the tokenizer file and token shards (one helper writes all three). A full disk
   (a file-size limit: EFBIG) and a failing rename leave the previous file and name the cause.
   POSIX only (fork, kill, setrlimit); elsewhere the test reports nothing to do. */
#if defined(__unix__) || defined(__APPLE__)
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#define CRASH_POSIX 1
#else
#define CRASH_POSIX 0
#endif
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <errno.h>

/* the test's hook: count the points of a save, SIGKILL the process at the kill_at-th */
static long hook_calls, kill_at;
static size_t chunk_bytes = 2048;
static void crash_hook(const char *stage);
#define MF__SAVE_HOOK(stage) crash_hook(stage)
#define MF__AFILE_CHUNK chunk_bytes
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"

#define DIR "build/test_crash/"
static char last_stage[32];
static void crash_hook(const char *stage) {
    snprintf(last_stage, sizeof last_stage, "%s", stage);
    hook_calls++;
#if CRASH_POSIX
    if (kill_at > 0 && hook_calls == kill_at) raise(SIGKILL);
#endif
}

#if CRASH_POSIX
/* a whole file into memory (NULL when missing); *n its size */
static unsigned char *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    *n = -1;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = (unsigned char *)malloc((size_t)*n + 1);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) { free(b); b = NULL; }
    fclose(f);
    return b;
}
static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

/* ---- what gets saved: version 0 (A) or 1 (B) of each kind of file ---- */
typedef struct kind {
    const char *name, *path;
    int (*save)(int version);   /* 0 on success */
    int (*loads)(void);         /* the file on disk loads: 1 */
} kind;

static mf_ctx *ck[2];           /* two small contexts with parameters and optimizer moments */
static mf_ctx *mk_ctx[2];
static mf_model *mk[2];         /* two relative models with memories (mf_model_save) */
static mf_tokenizer *tok[2];
static int32_t shard_ids[2][3000];

static mf_ctx *small_ctx(uint64_t seed) {
    mf_ctx *c = mf_ctx_new(seed);
    mf_linear_layer_new(c, "l1", 48, 64, 1);
    mf_linear_layer_new(c, "l2", 64, 40, 0);
    mf_init_normal(c, mf_param_find(c, "l2.weight"), 0.0f, 1.0f);
    return c;
}
static int save_ckpt(int v) {
    const char *meta[2] = {"what", v ? "B" : "A"};
    return mf_save(ck[v], DIR "ckpt.st", 1, meta, 1);
}
static int loads_ckpt(void) {
    mf_ctx *c = small_ctx(99);
    int ok = mf_load(c, DIR "ckpt.st", 1) == 0;
    if (!ok) printf("    mf_load: %s\n", mf_error(c));
    mf_ctx_free(c);
    return ok;
}
static mf_model_config rel_config(void) {
    mf_model_config c = mf_model_config_default();
    c.vocab = 11; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 16; c.max_seq = 8;
    c.mixer = MF_MIXER_RELATIVE; c.pos = MF_POS_NONE; c.mem_len = 6; c.compressive = 1; c.c_mem_len = 4;
    return c;
}
static int save_model(int v) { return mf_model_save(mk[v], DIR "model.st", 1, NULL, 0); }
static int loads_model(void) {
    mf_model_config cfg = rel_config();
    mf_ctx *c = mf_ctx_new(5);
    mf_model *m = mf_model_new(c, &cfg);
    int ok = m && mf_model_load(m, DIR "model.st", 1) == 0;
    if (!ok) printf("    mf_model_load: %s\n", mf_error(c));
    mf_model_free(m);
    mf_ctx_free(c);
    return ok;
}
static int save_tok(int v) { return mf_tokenizer_save(tok[v], DIR "tok.txt", NULL, 0); }
static int loads_tok(void) {
    mf_tokenizer *t = mf_tokenizer_load(DIR "tok.txt");
    int ok = t && !mf_tokenizer_error(t);
    mf_tokenizer_free(t);
    return ok;
}
static int save_shard(int v) { return mf_shard_write(DIR "shard.bin", MF_SHARD_LLMC, shard_ids[v], 3000 - 1000 * v, NULL, 0); }
static int loads_shard(void) {
    const char *p = DIR "shard.bin";
    mf_tokens *s = mf_tokens_open(&p, 1, MF_SHARD_AUTO);
    int ok = s && !mf_tokens_error(s);
    mf_tokens_close(s);
    return ok;
}

static void setup(void) {
    int v, i, b, T = 8, ids[16], tg[16];
    static const char text[2][200] = {"the king and the queen spoke of the sea and the long night",
                                      "a red rose waits for the moon; the people sing to the town"};
    for (v = 0; v < 2; v++) {
        mf_model_config cfg = rel_config();
        ck[v] = small_ctx(1 + (uint64_t)v);
        mk_ctx[v] = mf_ctx_new(7 + (uint64_t)v);
        mk[v] = mf_model_new(mk_ctx[v], &cfg);
        for (b = 0; b < 3; b++) { /* three calls: memories held and compressed */
            for (i = 0; i < 2 * T; i++) { ids[i] = (i * 3 + b + v) % 11; tg[i] = (ids[i] + 1) % 11; }
            mf_model_loss(mk[v], ids, tg, 2, T);
            mf_reset(mk_ctx[v]);
        }
        tok[v] = mf_tokenizer_train_bpe(text[v], strlen(text[v]), 270, NULL);
        for (i = 0; i < 3000; i++) shard_ids[v][i] = (i * 7 + v * 13) % 1000;
    }
}
static void teardown(void) {
    int v;
    for (v = 0; v < 2; v++) {
        mf_ctx_free(ck[v]);
        mf_model_free(mk[v]); mf_ctx_free(mk_ctx[v]);
        mf_tokenizer_free(tok[v]);
    }
}

static long total_points, total_lost;

/* one kill: fork a child that saves B over A and dies at hook call k (k = 0: at a random time, in
   a loop of saves of A and B). The file must be A or B and load. Returns 1 when the child died. */
static int kill_once(const kind *K, long k, long delay_us, const unsigned char *A, long na,
                     const unsigned char *B, long nb) {
    pid_t pid;
    int status, ok;
    long n;
    unsigned char *now;
    fflush(stdout);
    if ((pid = fork()) < 0) { MFT_CHECK(!"fork failed"); return 0; }
    if (pid == 0) {
        int v = 1;
        hook_calls = 0; kill_at = k;
        if (k > 0) _exit(K->save(1) == 0 ? 3 : 4); /* 3: the save ended before the k-th point */
        for (;;) { K->save(v); v ^= 1; }          /* killed by the parent */
    }
    if (k == 0) {
        struct timespec ts;
        ts.tv_sec = 0; ts.tv_nsec = delay_us * 1000;
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status)) { MFT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3); return 0; }
    total_points++;
    now = slurp(K->path, &n);
    ok = now && ((n == na && memcmp(now, A, (size_t)na) == 0) || (n == nb && memcmp(now, B, (size_t)nb) == 0));
    ok = ok && K->loads();
    if (!ok) {
        total_lost++;
        printf("    %s: killed at point %ld: the file is neither the old nor the new one, or does not load (size %ld)\n",
               K->name, k, n);
    }
    free(now);
    return 1;
}

/* every hook point of one save of B over A, then random moments */
static void sweep(const kind *K, int random_kills) {
    unsigned char *A, *B;
    long na, nb, points, k, before = total_points, lost = total_lost;
    char tmp[256];
    int r;
    snprintf(tmp, sizeof tmp, "%s.tmp", K->path);
    MFT_CHECK(K->save(1) == 0);
    B = slurp(K->path, &nb);
    MFT_CHECK(K->save(0) == 0);
    A = slurp(K->path, &na);
    MFT_CHECK(A && B && (na != nb || memcmp(A, B, (size_t)na) != 0));
    if (!A || !B) { free(A); free(B); return; }
    hook_calls = 0; kill_at = 0;
    MFT_CHECK(K->save(1) == 0); /* count the points of one save */
    points = hook_calls;
    MFT_CHECK(points >= 6 && strcmp(last_stage, "after dir fsync") == 0);
    MFT_CHECK(K->save(0) == 0);
    for (k = 1; k <= points + 1; k++) {
        kill_once(K, k, 0, A, na, B, nb);
        if (K->save(0) != 0) { MFT_CHECK(!"saving A again after a kill failed (a stale .tmp?)"); break; } /* start from A */
    }
    srand(12345);
    for (r = 0; r < random_kills; r++) kill_once(K, 0, 200 + rand() % 20000, A, na, B, nb);
    /* a stale .tmp (left by a kill before the rename) does not break the next save */
    hook_calls = 0; kill_at = 0;
    kill_once(K, 2, 0, A, na, B, nb);
    MFT_CHECK(exists(tmp));
    MFT_CHECK(K->save(1) == 0 && !exists(tmp));
    {
        long n;
        unsigned char *now = slurp(K->path, &n);
        MFT_CHECK(now && n == nb && memcmp(now, B, (size_t)nb) == 0 && K->loads());
        free(now);
    }
    printf("    %s: %ld of %ld hook points, %d random moments and 1 stale .tmp killed, %ld files lost\n", K->name,
           total_points - before - random_kills - 1, points, random_kills, total_lost - lost);
    MFT_CHECK(total_points - before >= points + random_kills);
    MFT_CHECK(total_lost == lost);
    free(A); free(B);
}

static const kind kinds[] = {
    {"mf_save (weights + optimizer)", DIR "ckpt.st", save_ckpt, loads_ckpt},
    {"mf_model_save (relative, compressive memories)", DIR "model.st", save_model, loads_model},
    {"mf_tokenizer_save", DIR "tok.txt", save_tok, loads_tok},
    {"mf_shard_write", DIR "shard.bin", save_shard, loads_shard},
};

static void test_kill_during_checkpoint_save(void) { sweep(&kinds[0], 8); }
static void test_kill_during_model_save(void) { chunk_bytes = 16384; sweep(&kinds[1], 4); chunk_bytes = 2048; }
static void test_kill_during_tokenizer_save(void) { chunk_bytes = 512; sweep(&kinds[2], 2); chunk_bytes = 2048; }
static void test_kill_during_shard_write(void) { chunk_bytes = 1024; sweep(&kinds[3], 2); chunk_bytes = 2048; }

/* a file-size limit (SIGXFSZ ignored: writes fail with EFBIG, as on a full disk) in a child: the
   save fails, names the cause, removes the .tmp, and the previous file stays */
static void full_disk(const kind *K, const char *(*message)(int version)) {
    unsigned char *A, *now;
    long na, n;
    int status, fds[2];
    pid_t pid;
    char tmp[256], line[1024];
    ssize_t got;
    snprintf(tmp, sizeof tmp, "%s.tmp", K->path);
    MFT_CHECK(K->save(0) == 0);
    A = slurp(K->path, &na);
    fflush(stdout);
    if (pipe(fds) != 0) { MFT_CHECK(!"pipe failed"); free(A); return; }
    if ((pid = fork()) == 0) { /* the limit applies to every file the child writes: its message goes through a pipe */
        struct rlimit rl;
        const char *msg;
        rl.rlim_cur = rl.rlim_max = (rlim_t)(na / 3);
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        msg = message(1);
        if (!msg) msg = "(no error)";
        if (write(fds[1], msg, strlen(msg)) < 0) _exit(2);
        _exit(strstr(msg, strerror(EFBIG)) && strstr(msg, "is unchanged") && strstr(msg, "disk full") ? 0 : 1);
    }
    close(fds[1]);
    got = read(fds[0], line, sizeof line - 1);
    line[got > 0 ? got : 0] = 0;
    close(fds[0]);
    waitpid(pid, &status, 0);
    printf("    %s with a file-size limit of %ld bytes: %s\n", K->name, na / 3, line);
    MFT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    now = slurp(K->path, &n);
    MFT_CHECK(now && A && n == na && memcmp(now, A, (size_t)na) == 0 && K->loads());
    MFT_CHECK(!exists(tmp));
    free(A); free(now);
}
static char errbuf[1024];
static const char *msg_ckpt(int v) { return save_ckpt(v) == 0 ? NULL : mf_error(ck[v]); }
static const char *msg_model(int v) { return save_model(v) == 0 ? NULL : mf_error(mk_ctx[v]); }
static const char *msg_tok(int v) { return mf_tokenizer_save(tok[v], DIR "tok.txt", errbuf, sizeof errbuf) == 0 ? NULL : errbuf; }
static const char *msg_shard(int v) {
    return mf_shard_write(DIR "shard.bin", MF_SHARD_LLMC, shard_ids[v], 3000 - 1000 * v, errbuf, sizeof errbuf) == 0 ? NULL : errbuf;
}
static void test_full_disk_keeps_the_previous_file(void) {
    full_disk(&kinds[0], msg_ckpt);
    full_disk(&kinds[1], msg_model);
    full_disk(&kinds[2], msg_tok);
    full_disk(&kinds[3], msg_shard);
}

/* a rename that fails (the path is a directory): the .tmp goes, the cause is named */
static void test_failed_rename_names_the_cause(void) {
    mkdir(DIR "a_dir.st", 0755);
    MFT_CHECK(mf_save(ck[0], DIR "a_dir.st", 0, NULL, 0) == -1);
    MFT_CHECK(strstr(mf_error(ck[0]), "renaming") && strstr(mf_error(ck[0]), strerror(EISDIR)));
    printf("    %s\n", mf_error(ck[0]));
    MFT_CHECK(!exists(DIR "a_dir.st.tmp"));
    mf_clear_error(ck[0]);
    rmdir(DIR "a_dir.st");
}
#endif

int main(void) {
#if CRASH_POSIX
    mkdir("build", 0755);
    mkdir(DIR, 0755);
    setup();
    MFT_RUN(test_kill_during_checkpoint_save);
    MFT_RUN(test_kill_during_model_save);
    MFT_RUN(test_kill_during_tokenizer_save);
    MFT_RUN(test_kill_during_shard_write);
    MFT_RUN(test_full_disk_keeps_the_previous_file);
    MFT_RUN(test_failed_rename_names_the_cause);
    printf("kill points tried: %ld, checkpoints lost: %ld\n", total_points, total_lost);
    teardown();
#else
    printf("not a POSIX system: nothing to kill\n");
#endif
    return mft_finish();
}
