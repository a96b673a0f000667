#!/bin/sh
# cpu_nvfp4.sh - the CPU NVFP4 kernel against the BF16 one (bench_cpu_nvfp4.c).
set -e
cd "$(dirname "$0")/../.."
extra=""
if ar t build/liblynn.a | grep -q nvfp4_gemm.o; then
	extra="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcudart -lstdc++"
fi
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Iinclude tests/bench/bench_cpu_nvfp4.c build/liblynn.a \
  $(pkg-config --libs libcjson libcurl libzstd openssl libmicrohttpd libpcre2-8 libutf8proc 2>/dev/null) \
  -lm -pthread $extra -o build/bench_cpu_nvfp4
echo "== cpu nvfp4"
build/bench_cpu_nvfp4
