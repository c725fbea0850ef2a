#!/usr/bin/env bash
# Every link and section citation in the repository resolves:
#   - in every tracked Markdown file, each relative link [text](path) and [text](path#anchor) names a
#     file or folder that exists, and an anchor names a heading of the target (GitHub's anchors:
#     lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats); [text](#anchor) a
#     heading of the same file;
#   - in every tracked text file, each citation "docs/NAME.md §n" or "§n.m" (and the further "§..."
#     of a list that follows it, "docs/math.md §13, §19.3") names a numbered heading of that manual
#     ("## 13. ..." or "### 19.3 ..."); inside docs/, "NAME.md §n" and, in docs/math.md, a bare "§n"
#     cite the same way.
# Perl only (no Python packages). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    files=$(git ls-files -co --exclude-standard | grep -v -E '^(build|tests/goldens|tests/fuzz/(seeds|regress))/')
else
    files=$(find . -type f -not -path './build/*' -not -path './.git/*' | sed 's|^\./||')
fi
printf '%s\n' "$files" | perl -e '
use strict; use warnings;
my @files = grep { length && -f $_ } map { chomp; $_ } <STDIN>;
my ($pass, $fail) = (0, 0);
my (%anchors, %sections);
sub slurp { my ($f) = @_; open(my $h, "<", $f) or return undef; local $/; my $s = <$h>; close $h; return $s; }
sub strip_code { my ($s) = @_; $s =~ s/^```.*?^```[^\n]*$//msg; return $s; }
sub anchors_of {
    my ($f) = @_;
    return $anchors{$f} if $anchors{$f};
    my %a; my %seen;
    my $s = slurp($f) // "";
    $s =~ s/^```.*?^```[^\n]*$//msg;
    for my $line (split /\n/, $s) {
        next unless $line =~ /^#{1,6}\s+(.*?)\s*#*\s*$/;
        my $h = lc $1;
        $h =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;          # a link in a heading keeps its text
        $h =~ s/[^\w\- ]//g;                         # GitHub: drop punctuation (keeps _ and -)
        $h =~ s/ /-/g;
        my $id = $h; $id .= "-" . $seen{$h} if $seen{$h}; $seen{$h}++;
        $a{$id} = 1;
    }
    return $anchors{$f} = \%a;
}
sub sections_of {
    my ($f) = @_;
    return $sections{$f} if $sections{$f};
    my %n;
    my $s = strip_code(slurp($f) // "");
    for my $line (split /\n/, $s) {
        $n{$1} = 1 if $line =~ /^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s/;
    }
    return $sections{$f} = \%n;
}
sub norm { my ($p) = @_; my @o; for (split m{/}, $p) { next if $_ eq "." || $_ eq ""; if ($_ eq "..") { pop @o } else { push @o, $_ } } return join("/", @o); }
my ($links, $cites) = (0, 0);
my @bad;
for my $f (@files) {
    my $dir = $f =~ m{^(.*)/} ? $1 : ".";
    my $text = slurp($f);
    next unless defined $text && $text !~ /\x00/;
    if ($f =~ /\.md$/) {
        my $s = strip_code($text);
        $s =~ s/`[^`\n]*`//g;                           # inline code is not a link
        while ($s =~ /\[[^\]\n]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g) {
            my $t = $1;
            next if $t =~ m{^[a-z][a-z0-9+.-]*:}i;        # http:, https:, mailto:
            $links++;
            my ($path, $anchor) = $t =~ /^([^#]*)(?:#(.*))?$/;
            my $target = $path eq "" ? $f : norm("$dir/$path");
            if (!-e $target) { push @bad, "$f: link ($t): no file $target"; next; }
            if (defined $anchor && length $anchor) {
                if ($target !~ /\.md$/) { push @bad, "$f: link ($t): an anchor into a file that is not Markdown"; next; }
                push @bad, "$f: link ($t): $target has no heading with the anchor #$anchor"
                    unless anchors_of($target)->{lc $anchor};
            }
        }
    }
    # citations: docs/NAME.md §n (anywhere), NAME.md §n (inside docs/), bare §n (inside docs/math.md)
    my @lines = split /\n/, $text;
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        my @c;
        while ($l =~ m{((?:\.\./)?docs/|(?<![\w/.]))(\w+)\.md(?:\)|`)?\s*(§\s?\d+(?:\.\d+)*(?:(?:,\s*|\s+and\s+|\s*,\s*and\s+)§\s?\d+(?:\.\d+)*)*)}g) {
            my ($pre, $name, $list) = ($1, $2, $3);
            my $doc = "docs/$name.md";
            next if $pre eq "" && $f !~ m{^docs/};           # "math.md §n" outside docs/: another file
            push @c, [$doc, $_] for $list =~ /§\s?(\d+(?:\.\d+)*)/g;
        }
        if ($f eq "docs/math.md") {
            my $l2 = $l; $l2 =~ s{\w+\.md\)?`?\s*§}{}g;
            while ($l2 =~ /§\s?(\d+(?:\.\d+)*)/g) { push @c, ["docs/math.md", $1]; }
        }
        for my $c (@c) {
            my ($doc, $n) = @$c;
            $cites++;
            $n =~ s/\.$//;
            if (!-f $doc) { push @bad, "$f:" . ($i + 1) . ": cites $doc §$n: no such manual"; next; }
            push @bad, "$f:" . ($i + 1) . ": cites $doc §$n: no heading numbered $n" unless sections_of($doc)->{$n};
        }
    }
}
my %seen;
@bad = grep { !$seen{$_}++ } @bad;
if (@bad) { print "FAIL $_\n" for @bad; $fail += @bad; }
my $bl = grep { /: link / } @bad; my $bc = @bad - $bl;
if ($links == 0) { print "FAIL no relative links found\n"; $fail++ } elsif (!$bl) { print "ok   every one of $links relative links in the Markdown files resolves\n"; $pass++ }
if ($cites == 0) { print "FAIL no section citations found\n"; $fail++ } elsif (!$bc) { print "ok   every one of $cites section citations names a heading\n"; $pass++ }
print "$pass passed, $fail failed\n";
exit($fail ? 1 : 0);
'
