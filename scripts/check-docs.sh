#!/usr/bin/env bash
# check-docs.sh: the project's prose states the present. Run by `make lint`
# from the repository root; prints file:line: rule: match for every finding
# and exits 1 if there is any.
#
# Files: every Markdown file git tracks (git ls-files '*.md'), and the
# comment lines (first non-blank characters `//`) of every tracked Go file
# except generated protobuf code (*.pb.go). Nothing else is excluded.
#
# Rules, each with exactly what it matches:
#
#  commit-id (Markdown and Go comments): a word of 7 to 40 lower-case hex
#    digits containing at least one digit and at least one letter a-f
#    (so English words like "decade" and numbers like 1000000 never match)
#    that is a prefix of a commit in `git rev-list --all`.
#  backticked-hex (Markdown): a code span holding only 7 to 40 lower-case
#    hex digits with at least one digit and one letter, e.g. `4f4b355`,
#    whether or not it names a commit of this clone.
#  work-period (Markdown, case-insensitive):
#    - "session" or "sessions" followed by a number: "session 12", "session #3"
#    - "work period(s)", "working period(s)", "work-period"
#    - "before|after|since|until" + "this|that|the" + "change|fix|refactor|
#      refactoring|rewrite|patch": "before the fix", "after this change"
#    - "earlier|previous|prior|first|old|older" + "version|build|binary|
#      session" (plural too): "first version", "older build"
#    - "earlier|previous|prior" + "run(s)": "(earlier run)"
#    - "before|since|until|older than|prior to" + "schema|version" + a
#      number, and "upgrade|upgrading from schema|version N": narration of
#      past schema versions ("before version 4 of the schema")
#    "session timeout", "the previous one", "before the commit" and
#    "Redis 7.0 or newer" do not match.
#  machine-label (Markdown table rows, lines starting with "|",
#    case-insensitive): "VM", "laptop", "desktop", "workstation",
#    "load ~3.5" / "load average 8" (a load figure), "this|my|our|the
#    shared" + "machine|box|host": a figure labelled by where or under what
#    load it ran. Prose describing the machine of a measurement is allowed.
#  out-of-repo (Markdown and Go comments): a relative path ("../…") that,
#    resolved from the file's folder, leaves the repository, or a mention
#    of "shared/design/" (the workspace outside the repository).
#  broken-link (Markdown): a link target "](path)" or "](path#anchor)"
#    that is not a URL (scheme:) nor a bare "#anchor" and names no file or
#    folder, resolved from the file's folder; and an anchor ("#x", alone
#    or after a Markdown file) that is no heading of that file, headings
#    turned into anchors as GitHub does (lower case, characters other than
#    letters, digits, "_", "-" and spaces dropped, spaces to "-", a repeat
#    suffixed "-1", "-2", …).
set -euo pipefail

root=$(git rev-parse --show-toplevel)
cd "$root"

commits=$(mktemp)
trap 'rm -f "$commits"' EXIT
git rev-list --all >"$commits"

{ git ls-files '*.md'; git ls-files '*.go' | grep -v '\.pb\.go$'; } |
	COMMITS=$commits perl -e '
use strict;
use warnings;

my %commit;
open(my $c, "<", $ENV{COMMITS}) or die "read commits: $!";
while (<$c>) {
	chomp;
	my $h = $_;
	$commit{substr($h, 0, $_)} = 1 for 7 .. 40; # every prefix of 7 to 40 digits
}
close $c;

my $hexid = qr/^(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}$/;
my $work_period = qr/\bsessions?\s+#?\d+|\bwork(?:ing)?[ -]periods?\b|\b(?:before|after|since|until)\s+(?:this|that|the)\s+(?:change|fix|refactor|refactoring|rewrite|patch)\b|\b(?:earlier|previous|prior|first|old|older)\s+(?:version|build|binary|session)s?\b|\b(?:earlier|previous|prior)\s+runs?\b|\b(?:before|since|until|older\s+than|prior\s+to)\s+(?:schema|version)\s+\d+|\bupgrad(?:e|ing)\s+from\s+(?:schema|version)\s+\d+/i;
my $machine = qr/\b(?:vm|laptop|desktop|workstation)\b|\bload(?:\s+average)?\s+~?[\d.]+|\b(?:this|my|our|the\s+shared)\s+(?:machine|box|host)\b/i;

my $found = 0;
sub report { printf "%s:%d: %s: %s\n", @_; $found = 1; }

# anchors returns the set of heading anchors of Markdown file f.
my %anchors_of;
sub anchors {
	my ($f) = @_;
	return $anchors_of{$f} if $anchors_of{$f};
	my (%set, %seen, $fence);
	open(my $in, "<", $f) or return {};
	while (<$in>) {
		$fence = !$fence if /^\s*```/;
		next if $fence || !/^#{1,6}\s+(.*?)\s*#*\s*$/;
		(my $a = lc $1) =~ s/[^\w\- ]//g;
		$a =~ s/ /-/g;
		my $n = $seen{$a}++;
		$set{$n ? "$a-$n" : $a} = 1;
	}
	close $in;
	return $anchors_of{$f} = \%set;
}

# inside says whether the relative path p, seen from folder dir, stays in
# the repository.
sub inside {
	my ($dir, $p) = @_;
	my @parts = grep { $_ ne "" && $_ ne "." } split m{/}, "$dir/$p";
	my $depth = 0;
	for (@parts) {
		$depth += $_ eq ".." ? -1 : 1;
		return 0 if $depth < 0;
	}
	return 1;
}

while (my $f = <STDIN>) {
	chomp $f;
	my $md = $f =~ /\.md$/;
	(my $dir = $f) =~ s{/?[^/]*$}{};
	open(my $in, "<", $f) or die "read $f: $!";
	while (my $line = <$in>) {
		my $ln = $.;
		next unless $md || $line =~ m{^\s*//};
		for my $tok ($line =~ /\b([0-9a-f]{7,40})\b/g) {
			report($f, $ln, "commit-id", $tok) if $tok =~ $hexid && $commit{$tok};
		}
		for my $p ($line =~ m{((?:\.\./)+[\w.-][\w./-]*)}g) {
			report($f, $ln, "out-of-repo", $p) unless inside($dir, $p);
		}
		report($f, $ln, "out-of-repo", $1) if $line =~ m{([^\s`(]*shared/design/[^\s`)]*)} && $1 !~ m{^\.\./};
		next unless $md;
		for my $t ($line =~ /\]\(([^)\s]+)\)/g) {
			next if $t =~ /^[a-z][a-z0-9+.-]*:/i;
			my ($path, $anchor) = $t =~ /^([^#]*)(?:#(.*))?$/;
			my $target = $path eq "" ? $f : $dir eq "" ? $path : "$dir/$path";
			if (!-e $target) {
				report($f, $ln, "broken-link", $t);
			} elsif (defined $anchor && $target =~ /\.md$/ && !anchors($target)->{$anchor}) {
				report($f, $ln, "broken-link", $t);
			}
		}
		for my $tok ($line =~ /`([0-9a-f]{7,40})`/g) {
			report($f, $ln, "backticked-hex", "`$tok`") if $tok =~ $hexid;
		}
		report($f, $ln, "work-period", $&) if $line =~ $work_period;
		report($f, $ln, "machine-label", $&) if $line =~ /^\|/ && $line =~ $machine;
	}
	close $in;
}
if ($found) {
	print STDERR "docs must describe the present: no commit ids, no figures labelled by work periods or machines, no pointers outside the repository, no broken links (scripts/check-docs.sh)\n";
	exit 1;
}
'
