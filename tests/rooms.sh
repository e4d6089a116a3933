#!/usr/bin/env bash
# The daemon's rooms: no source includes a header of a room ranked above its own, and the
# GPU plugin includes only the daemon's backend interface; the rooms of tools/: no program
# includes another's headers. Read from the compiler's own dependency files (-MMD -MP), so an
# include found through -I or spelled with ../ counts too.
#
# usage: tests/rooms.sh [BUILD_DIR...]    (relative to the repository root; default: each of
#                                          build build/asan build/tsan build/clang that exists)
#
# daemon/ROOMS, one room a line, top first; '#' starts a comment; the first word of a line is
# the room (a folder directly under daemon/), the rest of the line says what it owns:
#     requests dispatch of each ring entry's opcode, POOL_MAP, STATS
#     core     the allocator
# one or more lines listing the shared headers directly in daemon/ that every room may include
# (the others there are the top's):
#     shared: kvpoold.h log.h
# and one or more lines listing the daemon headers the GPU plugin may include, relative to
# daemon/:
#     backend-interface: pools/backend.h pools/jobs.h attn/attend.h core/kvcore.h
#
# tools/ROOMS, alike: the first word of a line is a program's folder directly under tools/,
# the rest says what the program is:
#     kvctl    the operator's command
# one or more lines listing the shared rooms (folders directly under tools/) that every
# program may include:
#     shared: common bpf
# and one or more lines listing the daemon headers tools may include, relative to daemon/:
#     daemon: core/kvcore.h
#
# Rules:
#  - every folder directly under daemon/ that holds .c or .h files (at any depth) is listed
#    in daemon/ROOMS, every listed room is a folder, and every backend-interface header exists;
#  - for each BUILD_DIR/daemon/ROOM/...X.d: every prerequisite under daemon/ is a shared
#    header (directly in daemon/ and listed as shared), or lies in ROOM or a room ranked
#    below it. The top level
#    (BUILD_DIR/daemon/X.d: main.c etc.) may include anything;
#  - for each BUILD_DIR/gpu/...X.d, and BUILD_DIR/tests/gpu/...X.d whose source is under gpu/
#    (gpu/attend_plan.c, built for the emulated tests even without nvcc): every prerequisite
#    under daemon/ is a backend-interface header;
#  - every folder directly under tools/ that holds .c or .h files is listed in tools/ROOMS, as a
#    program or a shared room (not both), every listed one is a folder, every daemon: header
#    exists, and no .c or .h lies directly in tools/;
#  - for each BUILD_DIR/tools/ROOM/...X.d: every prerequisite under tools/ lies in ROOM or a
#    shared room (a shared room's: in a shared room), one under daemon/ is a daemon: header,
#    and any other in the repository is under lib/ or uapi/ (or build/: generated, as the BPF
#    skeleton);
#  - sources under tests/ and lib/ are not checked.
# Prerequisites are normalized lexically (daemon/session/../pools/backend.h is
# daemon/pools/backend.h; absolute paths into the repository count as relative ones); those
# outside the repository (system headers) are ignored.
# Stale dependency files: one whose source (its first prerequisite) no longer exists (moved)
# is skipped, with a note on stderr. One that is out of date (a prerequisite in the repository
# is gone or newer than it) is skipped with a note if the same source has an up-to-date one in
# another build folder (an old build/tsan beside a fresh build), and fails ("rebuild")
# otherwise: what it says is no longer what the source includes.
# Fails when no dependency file was checked under any BUILD_DIR/daemon/ (build first).
# Exit status 0: no upward include; 1: each violation listed, one a line, naming the source,
# the header and the rule.
set -u
cd "$(dirname "$0")/.." || exit 1

usage() { echo "usage: tests/rooms.sh [BUILD_DIR...]"; }
fail() { echo "rooms: $*"; exit 1; }

for arg in "$@"; do
	case $arg in
	-h | --help) usage; exit 0 ;;
	-*) usage >&2; exit 2 ;;
	esac
done

# --- daemon/ROOMS ---------------------------------------------------------------------------
[ -f daemon/ROOMS ] || fail "daemon/ROOMS not found (the rooms' ranking, top first)"
rooms=()
iface=()
shared=()
errors=()
declare -A rank=()
n=0
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
	lineno=$((lineno + 1))
	line=${line%$'\r'}
	line=${line%%#*}
	if [[ $line =~ ^[[:space:]]*backend-interface:(.*)$ ]]; then
		read -r -a words <<<"${BASH_REMATCH[1]}"
		iface+=("${words[@]}")
		continue
	fi
	if [[ $line =~ ^[[:space:]]*shared:(.*)$ ]]; then
		read -r -a words <<<"${BASH_REMATCH[1]}"
		shared+=("${words[@]}")
		continue
	fi
	read -r -a words <<<"$line"
	[ "${#words[@]}" -gt 0 ] || continue
	room=${words[0]}
	if [[ $room == *: ]]; then
		errors+=("daemon/ROOMS:$lineno: unknown key '$room' (only shared: and backend-interface:)")
	elif ! [[ $room =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]]; then
		errors+=("daemon/ROOMS:$lineno: '$room' is not a room (a folder name directly under daemon/)")
	elif [ -n "${rank[$room]+x}" ]; then
		errors+=("daemon/ROOMS:$lineno: room $room listed twice")
	else
		n=$((n + 1))
		rank[$room]=$n
		rooms+=("$room")
	fi
done <daemon/ROOMS
[ "$n" -gt 0 ] || errors+=("daemon/ROOMS lists no room")

for room in "${rooms[@]}"; do
	[ -d "daemon/$room" ] || errors+=("daemon/ROOMS lists $room, but there is no folder daemon/$room")
done
while IFS= read -r dir; do
	[ -n "${rank[$dir]+x}" ] ||
		errors+=("daemon/$dir holds sources but is not a room listed in daemon/ROOMS")
done < <(find daemon -mindepth 2 -type f \( -name '*.c' -o -name '*.h' \) -not -path '*/.*' \
	-printf '%P\n' | cut -d/ -f1 | sort -u)

# daemon_headers ROOMS KEY HEADER...: the daemon headers a KEY: line of ROOMS lists, each a plain
# path under daemon/ that exists (else an error), into $headers, relative to daemon/.
daemon_headers() {
	local from=$1 key=$2 h
	shift 2
	headers=
	for h in "$@"; do
		h=${h#daemon/}
		case /$h/ in
		*/../* | */./* | //*) errors+=("$from: $key: '$h' is not a plain path under daemon/") ;;
		*) [ -f "daemon/$h" ] || errors+=("$from: $key: daemon/$h does not exist") ;;
		esac
		headers+=" $h"
	done
}
daemon_headers daemon/ROOMS backend-interface "${iface[@]}"
ifaces=$headers

sharedstr=
for h in "${shared[@]}"; do
	h=${h#daemon/}
	case $h in
	*/*) errors+=("daemon/ROOMS: shared: '$h' is not a header directly in daemon/") ;;
	*) [ -f "daemon/$h" ] || errors+=("daemon/ROOMS: shared: daemon/$h does not exist") ;;
	esac
	sharedstr+=" $h"
done

# --- tools/ROOMS -----------------------------------------------------------------------------
[ -f tools/ROOMS ] || fail "tools/ROOMS not found (the programs' folders and the shared rooms)"
tprogs=()
tshared=()
tdaemon=()
declare -A troom=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
	lineno=$((lineno + 1))
	line=${line%$'\r'}
	line=${line%%#*}
	if [[ $line =~ ^[[:space:]]*(shared|daemon):(.*)$ ]]; then
		read -r -a words <<<"${BASH_REMATCH[2]}"
		if [ "${BASH_REMATCH[1]}" = daemon ]; then
			tdaemon+=("${words[@]}")
			continue
		fi
		for room in "${words[@]}"; do
			if [ -n "${troom[$room]+x}" ]; then
				errors+=("tools/ROOMS:$lineno: room $room listed twice")
			else
				troom[$room]=shared
				tshared+=("$room")
			fi
		done
		continue
	fi
	read -r -a words <<<"$line"
	[ "${#words[@]}" -gt 0 ] || continue
	room=${words[0]}
	if [[ $room == *: ]]; then
		errors+=("tools/ROOMS:$lineno: unknown key '$room' (only shared: and daemon:)")
	elif [ -n "${troom[$room]+x}" ]; then
		errors+=("tools/ROOMS:$lineno: room $room listed twice")
	else
		troom[$room]=program
		tprogs+=("$room")
	fi
done <tools/ROOMS
[ "${#tprogs[@]}" -gt 0 ] || errors+=("tools/ROOMS lists no program")

for room in "${tprogs[@]}" "${tshared[@]}"; do
	if ! [[ $room =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]]; then
		errors+=("tools/ROOMS: '$room' is not a room (a folder name directly under tools/)")
	elif ! [ -d "tools/$room" ]; then
		errors+=("tools/ROOMS lists $room, but there is no folder tools/$room")
	fi
done
while IFS= read -r f; do
	case $f in
	*/*)
		[ -n "${troom[${f%%/*}]+x}" ] ||
			errors+=("tools/${f%%/*} holds sources but is not a room listed in tools/ROOMS")
		;;
	*) errors+=("tools/$f lies directly in tools/: a source goes in its program's folder or a shared room (tools/ROOMS)") ;;
	esac
done < <(find tools -mindepth 1 -type f \( -name '*.c' -o -name '*.h' \) -not -path '*/.*' \
	-printf '%P\n' | awk -F/ '{ print (NF > 1 ? $1 "/" : $1) }' | sort -u)

daemon_headers tools/ROOMS daemon "${tdaemon[@]}"
tdaemonstr=$headers

if [ "${#errors[@]}" -gt 0 ]; then
	printf 'rooms: %s\n' "${errors[@]}"
	exit 1
fi

# --- build folders --------------------------------------------------------------------------
builds=()
if [ $# -gt 0 ]; then
	for b in "$@"; do
		b=${b%/}
		[ -d "$b" ] || fail "no such build folder: $b"
		builds+=("$b")
	done
else
	for b in build build/asan build/tsan build/clang; do
		[ -d "$b" ] && builds+=("$b")
	done
	[ "${#builds[@]}" -gt 0 ] || fail "no dependency files: build first (no build folder)"
fi

# For awk: "M <tab> MTIME <tab> PATH" for each file in the repository; then "B <tab> DIR" for each
# build folder, followed by one line a dependency file: "KIND <tab> MTIME <tab> path under
# DIR/KIND <tab> path" (KIND daemon, gpu, testgpu for DIR/tests/gpu, tools).
list() {
	local b k
	find . -name .git -prune -o -printf 'M\t%T@\t%P\n'
	for b in "${builds[@]}"; do
		printf 'B\t%s\n' "$b"
		for k in daemon gpu tests/gpu tools; do
			[ -d "$b/$k" ] || continue
			find -H "$b/$k" -type f -name '*.d' -printf "${k/tests\/gpu/testgpu}\t%T@\t%P\t%p\n"
		done
	done
	return 0
}

rankstr=
for room in "${rooms[@]}"; do rankstr+=" $room=${rank[$room]}"; done
troomstr=
for room in "${tprogs[@]}" "${tshared[@]}"; do troomstr+=" $room=${troom[$room]}"; done

# shellcheck disable=SC2016
prog='
BEGIN {
	FS = "\t"
	nr = split(rankstr, a, " ")
	for (i = 1; i <= nr; i++) { split(a[i], kv, "="); rank[kv[1]] = kv[2] + 0 }
	ni = split(ifaces, a, " ")
	for (i = 1; i <= ni; i++) iface["daemon/" a[i]] = 1
	ns = split(sharedstr, a, " ")
	for (i = 1; i <= ns; i++) sharedh["daemon/" a[i]] = 1
	nt = split(troomstr, a, " ")
	for (i = 1; i <= nt; i++) { split(a[i], kv, "="); troom[kv[1]] = kv[2] }
	nt = split(tdaemonstr, a, " ")
	tdaemonlist = ""
	for (i = 1; i <= nt; i++) {
		tdaemonh["daemon/" a[i]] = 1
		tdaemonlist = tdaemonlist (i > 1 ? (i < nt ? ", " : " and ") : "") "daemon/" a[i]
	}
	if (tdaemonlist == "") tdaemonlist = "nothing"
	nviol = 0; ndaemon = 0; ngpu = 0; ntools = 0; ngone = 0; nskip = 0; builds = ""
}

# Lexically normalized absolute path of p (relative to the repository root).
function norm(p,   n, parts, out, k, i, seg, res) {
	if (substr(p, 1, 1) != "/") p = rootL "/" p
	n = split(p, parts, "/")
	k = 0
	for (i = 1; i <= n; i++) {
		seg = parts[i]
		if (seg == "" || seg == ".") continue
		if (seg == "..") { if (k > 0) k--; continue }
		out[++k] = seg
	}
	res = ""
	for (i = 1; i <= k; i++) res = res "/" out[i]
	return res == "" ? "/" : res
}

# p relative to the repository root, or "" if outside it.
function rel(p,   q) {
	q = norm(p)
	if (index(q, rootL "/") == 1) return substr(q, length(rootL) + 2)
	if (rootP != rootL && index(q, rootP "/") == 1) return substr(q, length(rootP) + 2)
	return ""
}

function exists(p,   r, x) {
	r = (getline x < p)
	close(p)
	return r >= 0
}

# Adds the prerequisites of one logical (joined) line of a dependency file to deps[].
function rule(s,   c, w, nw, i) {
	gsub(/\\ /, "\001", s)
	gsub(/\$\$/, "$", s)
	c = index(s, ":")
	if (c == 0) { if (s ~ /[^ \t]/) bad = 1; return }
	seenrule = 1
	nw = split(substr(s, c + 1), w, /[ \t]+/)
	for (i = 1; i <= nw; i++) {
		if (w[i] == "" || w[i] == "|") continue
		gsub(/\001/, " ", w[i])
		deps[++ndeps] = w[i]
	}
}

# Reads dependency file f into deps[1..ndeps]; 0 if it could not be read, has no rule, or has
# a line that is not a rule (truncated, or not written by the compiler).
function readdeps(f,   line, buf, r) {
	ndeps = 0; seenrule = 0; bad = 0; buf = ""
	while ((r = (getline line < f)) > 0) {
		sub(/\r$/, "", line)
		if (line ~ /\\$/) { buf = buf substr(line, 1, length(line) - 1) " "; continue }
		rule(buf line)
		buf = ""
	}
	if (buf != "") rule(buf)
	close(f)
	return r == 0 && seenrule && !bad
}

function violation(msg) {
	if (msg in seen) return
	seen[msg] = 1
	nviol++
	print "V\trooms: " msg
}

# The modification time of repository file p (relative), "" if unknown, "gone" if absent.
function mtime(p) {
	if (p in mt) return mt[p]
	return exists(p) ? "" : "gone"
}

$1 == "M" { mt[$3] = $2 + 0; next }
$1 == "B" { build = $2; next }

{
	kind = $1; dtime = $2 + 0; sub_ = $3; f = $4
	if (!readdeps(f)) { violation(f ": unreadable, empty or malformed: rebuild"); next }
	src = rel(deps[1])
	if (src == "" ? !exists(deps[1]) : mtime(src) == "gone") {
		ngone++
		if (gone1 == "") gone1 = f " (" deps[1] ")"
		next
	}
	if (src == "") src = deps[1]
	if (kind == "testgpu" && src !~ /^gpu\//) next

	# Out of date: a prerequisite in the repository is gone or newer than the dependency file.
	why = ""
	for (i = 1; i <= ndeps && why == ""; i++) {
		d = rel(deps[i])
		if (d == "") continue
		t = mtime(d)
		if (t == "gone") why = d " is gone"
		else if (t != "" && t > dtime) why = d " is newer"
	}
	if (why != "") {
		oldn[src]++
		if (!(src in old)) old[src] = f ": " why
		next
	}
	fresh[src] = 1

	if (kind == "daemon") {
		own = index(sub_, "/") ? substr(sub_, 1, index(sub_, "/") - 1) : ""
		if (own != "" && !(own in rank)) {
			violation(src ": " own " is not a room listed in daemon/ROOMS (" f ")")
			next
		}
		ndaemon++
	} else if (kind == "tools") {
		own = index(sub_, "/") ? substr(sub_, 1, index(sub_, "/") - 1) : ""
		if (!(own in troom)) {
			violation(src ": " (own == "" ? "directly in tools/, in no room" : own " is not a room") \
				  " listed in tools/ROOMS (" f ")")
			next
		}
		ntools++
	} else {
		ngpu++
	}
	if (!(build in counted)) { counted[build] = 1; builds = builds (builds == "" ? "" : ", ") build }

	if (kind == "tools") {
		for (i = 1; i <= ndeps; i++) {
			d = rel(deps[i])
			# Outside the repository (system headers), or generated (the BPF skeleton).
			if (d == "" || d ~ /^build\// || index(d, rel(build) "/") == 1) continue
			if (d ~ /^(lib|uapi)\//) continue
			if (d ~ /^daemon\//) {
				if (!(d in tdaemonh))
					violation(src " includes " d ": of the daemon, tools may include only " \
						  tdaemonlist " (tools/ROOMS)")
				continue
			}
			if (d !~ /^tools\//) {
				violation(src " includes " d ": tools may include only tools/, lib/, uapi/ and " \
					  tdaemonlist " (tools/ROOMS)")
				continue
			}
			rest = substr(d, 7)
			r2 = index(rest, "/") ? substr(rest, 1, index(rest, "/") - 1) : ""
			if (r2 == own || (r2 in troom && troom[r2] == "shared")) continue
			if (troom[own] == "shared")
				violation(src " includes " d ": " own " is a shared room and may include only" \
					  " the shared rooms (tools/ROOMS)")
			else
				violation(src " includes " d ": " own " may include only its own folder and" \
					  " the shared rooms (tools/ROOMS)")
		}
		next
	}

	for (i = 1; i <= ndeps; i++) {
		d = rel(deps[i])
		if (d !~ /^daemon\//) continue
		rest = substr(d, 8)
		if (kind != "daemon") {
			if (!(d in iface))
				violation(src " includes " d ": gpu/ may include only the backend interface")
			continue
		}
		if (own == "") continue
		if (index(rest, "/") == 0) {
			if (!(d in sharedh))
				violation(src " includes " d ": a header of the top, not shared (daemon/ROOMS)")
			continue
		}
		r2 = substr(rest, 1, index(rest, "/") - 1)
		if (!(r2 in rank))
			violation(src " includes " d ": " r2 " is not a room listed in daemon/ROOMS")
		else if (rank[r2] < rank[own])
			violation(src " includes " d ": " own " is below " r2)
	}
}

END {
	# A source is checked if one build folder has its dependency file up to date.
	for (s in old) {
		if (s in fresh) { nskip += oldn[s]; if (skip1 == "") skip1 = old[s]; continue }
		violation(s ": its dependency files are out of date (" old[s] "): rebuild")
	}
	if (ngone) print "N\trooms: note: skipped " ngone " dependency files whose source is gone (moved?), e.g. " gone1
	if (nskip) print "N\trooms: note: skipped " nskip " out-of-date dependency files of sources checked in another build folder, e.g. " skip1
	print "S\t" nviol "\t" ndaemon "\t" ngpu "\t" ntools "\t" builds
}
'

nviol='' ndaemon=0 ngpu=0 ntools=0 counted=''
while IFS=$'\t' read -r tag a b c d e; do
	case $tag in
	V) echo "$a" ;;
	N) echo "$a" >&2 ;;
	S) nviol=$a ndaemon=$b ngpu=$c ntools=$d counted=$e ;;
	esac
done < <(list | awk -v rootL="$(pwd -L)" -v rootP="$(pwd -P)" -v rankstr="$rankstr" \
	-v ifaces="$ifaces" -v sharedstr="$sharedstr" -v troomstr="$troomstr" \
	-v tdaemonstr="$tdaemonstr" "$prog" | LC_ALL=C sort)
[ -n "$nviol" ] || fail "awk failed"

ddirs=$(printf '%s/daemon, ' "${builds[@]}")
[ "$ndaemon" -gt 0 ] || fail "no dependency files under ${ddirs%, }: build first"
total=$((ndaemon + ngpu + ntools))
if [ "$nviol" -gt 0 ]; then
	[ "$nviol" = 1 ] && v=violation || v=violations
	echo "rooms: $nviol $v in $total objects checked in $counted ($ndaemon daemon, $ngpu gpu, $ntools tools)"
	exit 1
fi
echo "rooms: $total objects checked in $counted ($ndaemon daemon, $ngpu gpu, $ntools tools): no upward include"
exit 0
