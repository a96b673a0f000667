#!/bin/sh
# deps.sh - install what lynn's build and tests need on Debian 12, and only
# what is missing: re-running is fast and offline when everything is there.
set -e
cd "$(dirname "$0")/../.."

PKGS="build-essential pkg-config libcjson-dev libcurl4-openssl-dev libzstd-dev libssl-dev check \
libmicrohttpd-dev libpcre2-dev libutf8proc-dev python3 python3-jinja2 python3-numpy clang nodejs npm"

missing=""
for p in $PKGS; do
	# nodejs/npm may come from elsewhere (a newer node on PATH is fine)
	case $p in
	nodejs) command -v node >/dev/null 2>&1 && continue ;;
	npm) command -v npm >/dev/null 2>&1 && continue ;;
	esac
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "deps: installing:$missing"
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -q
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi

# npm oracles used by the tests (tests/node/node_modules is git-ignored)
if [ -f tests/node/package-lock.json ]; then
	if [ ! -f tests/node/node_modules/.package-lock.json ] ||
	   [ tests/node/package-lock.json -nt tests/node/node_modules/.package-lock.json ]; then
		echo "deps: npm ci in tests/node"
		(cd tests/node && npm ci --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error)
	fi
fi
# llama.cpp's source (vocab test vectors, chat templates) from node-llama-cpp's bundle
bundle=tests/node/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ -f "$bundle" ] && [ ! -d tests/node/llama.cpp/models ]; then
	echo "deps: llama.cpp source from node-llama-cpp's bundle"
	rm -rf tests/node/llama.cpp
	git clone -q "$bundle" tests/node/llama.cpp 2>/dev/null
fi
