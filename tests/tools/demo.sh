#!/bin/sh
# demo.sh - lynn's main job on the bundled tiny model (run by `make demo`).
set -e
cd "$(dirname "$0")/../.."
echo "== lynn --version"
./lynn --version
echo "== lynn help"
./lynn help
echo "== lynn eval (four gates; scripted endpoint)"
sh tests/tools/demo_eval.sh
