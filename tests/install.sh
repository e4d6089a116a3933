#!/usr/bin/env bash
# `make install` into a scratch prefix, then build an engine against the
# installed libkvpool through pkg-config alone.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
make --no-print-directory -s install PREFIX="$dir" >/dev/null
cat >"$dir/engine.c" <<'C'
#include <libkvpool.h>
#include <stdio.h>
int main(void)
{
	struct kvp_connect_opts o = { .socket_path = "/nonexistent/kvpool.sock" };
	struct kvp_client *c;
	/* No daemon there: the call must fail cleanly with -ENOENT. */
	return kvp_connect(&o, &c) == -2 ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$dir/lib/pkgconfig
# shellcheck disable=SC2046
cc -std=gnu11 -Wall -Wextra -Werror "$dir/engine.c" $(pkg-config --cflags --libs libkvpool) -o "$dir/engine"
"$dir/engine"
