#!/usr/bin/env bash
# The man pages (docs/man/) render without warnings and say what the programs' --help says.
#
# For kvpoold, kvctl, kvtrace and kvbench (in $BIN, default build/bin; or $KVPOOLD, $KVCTL,
# $KVTRACE, $KVBENCH):
#  (a) `groff -man -ww -z PAGE` prints nothing and `man -l PAGE` renders it cleanly;
#  (b) the long options of `PROG --help` are those of the page's OPTIONS section;
#  (c) for kvctl and kvbench, the commands of `PROG --help` are those of the page's COMMANDS.
# docs/man/kvpool.conf.5 and docs/man/libkvpool.3, when present, must render as in (a).
#
# How each side is read:
#  --help, options: every `--[a-z][a-z-]*` that opens an option-list entry (first on its line,
#    or after "-x, ") or stands in a synopsis ("[--json", "| --prometheus", ", --context").
#    That leaves out options named in prose ("the daemon runs with --spin-us 200" in kvbench's
#    help names kvpoold's option, not kvbench's).
#  --help, commands: the lines under "Commands:" (kvbench: "Benchmarks:") up to the first blank
#    line that are indented by exactly two spaces; a command is the leading words of
#    lower-case letters, '_' and '-' of what comes before the first two blanks in a row (the
#    description's column): "pool create NAME KEY=VALUE...   create a pool" is "pool create",
#    "top [--json] ..." is "top", "limits              this machine's ..." is "limits".
#  man page: a section runs from its `.SH NAME` line to the next `.SH`, its .SS subsections
#    included; its entries are `.TP` paragraphs and an entry's tag is the line after `.TP`
#    (lists nested in a description use .IP, so they are not read as entries).
#    Options: every `--[a-z][a-z-]*` in the OPTIONS section's tags, `\-` read as `-`.
#    Commands: the leading bold text of each COMMANDS tag (fonts from .B/.BR/.BI/.RB/...
#    arguments and from \fB/\fI/\fR escapes), then its leading words as in --help:
#    `\fBpool create\fR \fIname key\fB=\fIvalue\fR...` is "pool create".
# Prints each mismatch; exits 1 if there is any, 77 when man or groff is not installed.
set -eu
cd "$(dirname "$0")/.." || exit 1

if ! command -v man >/dev/null || ! command -v groff >/dev/null; then
	echo "man or groff is not installed (apt-get install man-db groff-base)"
	exit 77
fi
# The pages are ASCII; a fixed locale keeps man from warning about the environment's. man-db
# sandboxes its filters with seccomp, which some containers refuse: it adds nothing here.
export LC_ALL=C MAN_DISABLE_SECCOMP=1 MANWIDTH=80

bin=${BIN:-build/bin}
declare -A prog=(
	[kvpoold]=${KVPOOLD:-$bin/kvpoold}
	[kvctl]=${KVCTL:-$bin/kvctl}
	[kvtrace]=${KVTRACE:-$bin/kvtrace}
	[kvbench]=${KVBENCH:-$bin/kvbench}
)
declare -A page=(
	[kvpoold]=docs/man/kvpoold.8
	[kvctl]=docs/man/kvctl.8
	[kvtrace]=docs/man/kvtrace.1
	[kvbench]=docs/man/kvbench.1
)
mismatches=0

mismatch() {
	echo "$*"
	mismatches=$((mismatches + 1))
}

# (a): no warning from groff, none from man, and man's exit status 0.
check_renders() {
	local file=$1 out
	out=$(groff -man -ww -z "$file" 2>&1) || true
	[ -z "$out" ] || mismatch "$file: groff -man -ww -z warns:"$'\n'"$out"
	if ! out=$(man -l "$file" 2>&1 >/dev/null); then
		mismatch "$file: man -l failed: $out"
	elif [ -n "$out" ]; then
		mismatch "$file: man -l warns: $out"
	fi
}

help_options() { # stdin: --help text
	grep -oE -- '(^ *|^ *-[a-zA-Z], |\[|\| |, )--[a-z][a-z-]*' | grep -oE -- '--[a-z][a-z-]*' | sort -u || true
}

help_commands() { # stdin: --help text
	awk '/^(Commands|Benchmarks):$/ { on = 1; next }
	     on && /^$/ { exit }
	     on && /^  [a-z]/ {
		line = substr($0, 3); sub(/  .*/, "", line) # the description follows 2+ blanks
		k = split(line, w, " "); name = ""
		for (i = 1; i <= k && w[i] ~ /^[a-z][a-z_-]*$/; i++)
			name = name (name == "" ? "" : " ") w[i]
		print name
	     }' | sort -u
}

# The tags of section $2 of page $1, one a line, as written.
man_tags() {
	awk -v want="$2" '
	/^\.SH/ { s = $0; sub(/^\.SH[ \t]+/, "", s); gsub(/"/, "", s); on = (s == want); next }
	on && tag { print; tag = 0; next }
	on && /^\.TP/ { tag = 1 }' "$1"
}

man_options() { # $1 page
	man_tags "$1" OPTIONS | sed 's/\\-/-/g' | grep -oE -- '--[a-z][a-z-]*' | sort -u || true
}

man_commands() { # $1 page
	man_tags "$1" COMMANDS | awk '
	# Appends text t set in font f to out: bold characters and blanks as they are, the
	# others as \001, so that the leading bold text ends at the first \001.
	function emit(t, f,   i, c) {
		for (i = 1; i <= length(t); i++) {
			c = substr(t, i, 1)
			out = out ((f == "B" || c == " ") ? c : "\001")
		}
	}
	# Text with inline escapes, starting in font f.
	function inline(s, f,   c, n) {
		while (s != "") {
			if (substr(s, 1, 2) == "\\f") {
				c = substr(s, 3, 1)
				if (c == "(") { f = substr(s, 4, 2); s = substr(s, 6) }
				else if (c == "[") { n = index(s, "]"); f = substr(s, 4, n - 4); s = substr(s, n + 1) }
				else { f = c; s = substr(s, 4) }
				if (f == "P" || f == "")
					f = "R"
			} else if (substr(s, 1, 2) == "\\-") {
				emit("-", f); s = substr(s, 3)
			} else if (substr(s, 1, 2) == "\\&" || substr(s, 1, 2) == "\\c") {
				s = substr(s, 3)
			} else {
				emit(substr(s, 1, 1), f); s = substr(s, 2)
			}
		}
	}
	# Splits macro arguments (blank-separated words or "quoted strings") into A[1..n].
	function args(s,   n, a) {
		n = 0
		for (;;) {
			sub(/^[ \t]+/, "", s)
			if (s == "")
				return n
			if (substr(s, 1, 1) == "\"") {
				s = substr(s, 2); a = ""
				while (s != "") {
					if (substr(s, 1, 2) == "\"\"") { a = a "\""; s = substr(s, 3); continue }
					if (substr(s, 1, 1) == "\"") { s = substr(s, 2); break }
					a = a substr(s, 1, 1); s = substr(s, 2)
				}
			} else {
				match(s, /^[^ \t]+/); a = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1)
			}
			A[++n] = a
		}
	}
	{
		out = ""
		if ($0 ~ /^\.(B|I|SB|SM)([ \t]|$)/) {
			m = $1; sub(/^\./, "", m); n = args(substr($0, length($1) + 1))
			for (i = 1; i <= n; i++)
				inline((i > 1 ? " " : "") A[i], m == "B" || m == "SB" ? "B" : "R")
		} else if ($0 ~ /^\.(BR|BI|IB|IR|RB|RI)([ \t]|$)/) {
			m = $1; sub(/^\./, "", m); n = args(substr($0, length($1) + 1))
			for (i = 1; i <= n; i++)
				inline(A[i], substr(m, 2 - i % 2, 1))
		} else {
			inline($0, "R")
		}
		sub(/^ +/, "", out)
		bold = out; sub(/\001.*/, "", bold)
		k = split(bold, w, " "); name = ""
		for (i = 1; i <= k && w[i] ~ /^[a-z][a-z_-]*$/; i++)
			name = name (name == "" ? "" : " ") w[i]
		if (name != "")
			print name
	}' | sort -u
}

# Prints "WHAT in --help, not in the page's SECTION" and the converse, for sets $4 and $5.
compare() {
	local name=$1 what=$2 section=$3 help=$4 man=$5 x
	while read -r x; do
		[ -n "$x" ] && mismatch "$name: $what '$x' in --help, not in ${page[$name]}'s $section"
	done < <(comm -23 <(echo "$help") <(echo "$man"))
	while read -r x; do
		[ -n "$x" ] && mismatch "$name: $what '$x' in ${page[$name]}'s $section, not in --help"
	done < <(comm -13 <(echo "$help") <(echo "$man"))
}

for name in kvpoold kvctl kvtrace kvbench; do
	if [ ! -f "${page[$name]}" ]; then
		mismatch "$name: no man page ${page[$name]}"
		continue
	fi
	check_renders "${page[$name]}"
	if ! help=$("${prog[$name]}" --help 2>&1); then
		mismatch "$name: ${prog[$name]} --help failed: $help"
		continue
	fi
	compare "$name" option OPTIONS "$(help_options <<<"$help")" "$(man_options "${page[$name]}")"
	case $name in
	kvctl | kvbench)
		compare "$name" command COMMANDS "$(help_commands <<<"$help")" \
			"$(man_commands "${page[$name]}")"
		;;
	esac
done
for file in docs/man/kvpool.conf.5 docs/man/libkvpool.3; do
	[ ! -f "$file" ] || check_renders "$file"
done

if [ "$mismatches" -gt 0 ]; then
	echo "man pages: $mismatches mismatches"
	exit 1
fi
echo "man pages: every page renders; options and commands match --help"
