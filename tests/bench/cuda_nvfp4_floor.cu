/*
 * cuda_nvfp4_floor.cu - the physical floor and the tc2 occupancy sweep on the
 * GPU (tests/bench/cuda_nvfp4_floor.sh; not part of `make bench`):
 *  - a read-only streaming kernel over 9, 13.5, 64 and 286 MB, graphs of 200
 *    launches, plain and with programmatic dependent launch: what a kernel
 *    that only reads the NVFP4 bytes can reach;
 *  - tc2 (kernels/nvfp4_gemm.cu, included) at ring depths 3/4/6/8 and 2-4
 *    blocks per SM, K groups 1-8, PDL off/on, for in_proj_qkv, lm_head and the
 *    M = 1 MoE layer.
 * With an argument it only launches the default tc2 a few times (for Nsight
 * Compute: ncu -k regex:tc2). Results: tests/bench/results/h200_floor*.txt.
 */
#include "../../kernels/nvfp4_gemm.cu"
#include <cstdio>
#include <vector>
#include <cstring>
#include <cmath>

#define CK(x) do { cudaError_t e__ = (x); if (e__ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e__)); exit(3);} } while (0)

static cudaStream_t st;
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

template <typename F> static double tgraph(F f, int iters)
{
	cudaGraph_t gr; cudaGraphExec_t ge; cudaEvent_t e0, e1; float ms;
	f(0); CK(cudaStreamSynchronize(st));
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < iters; i++) f(i);
	CK(cudaStreamEndCapture(st, &gr));
	CK(cudaGraphInstantiate(&ge, gr, 0));
	CK(cudaGraphLaunch(ge, st));
	CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, st));
	for (int r = 0; r < 3; r++) CK(cudaGraphLaunch(ge, st));
	CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CK(cudaGetLastError());
	cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
	return ms * 1e3 / (3 * iters);
}

template <int U>
__global__ void __launch_bounds__(256) readk(const uint4 *__restrict__ p, size_t n16, unsigned *out)
{
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	size_t base = ((size_t)blockIdx.x * U) * 256 + threadIdx.x;
	uint4 v[U];
#pragma unroll
	for (int u = 0; u < U; u++) {
		size_t i = base + (size_t)u * 256;
		v[u] = i < n16 ? __ldcs(p + i) : make_uint4(0, 0, 0, 0);
	}
	unsigned a = 0;
#pragma unroll
	for (int u = 0; u < U; u++) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
	asm volatile("griddepcontrol.wait;" ::: "memory");
	if (a == 0x12345678u) *out = a;
}

__global__ void emptyk(unsigned *out) { if (threadIdx.x == 1000) *out = 1; }

template <int U>
static void launch_read(const void *p, size_t bytes, unsigned *o, bool pdl)
{
	size_t n16 = bytes / 16;
	unsigned blocks = (unsigned)((n16 + 256 * U - 1) / (256 * U));
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];
	cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(256); cfg.stream = st;
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
	CK(cudaLaunchKernelEx(&cfg, readk<U>, (const uint4 *)p, n16, o));
}

struct dw { uint8_t *p, *s; float *a; int64_t n, k, E; };

static dw mk(int64_t n, int64_t k, int64_t E)
{
	dw w; w.n = n; w.k = k; w.E = E;
	size_t pb = (size_t)(E * n * k / 2), sb = (size_t)(E * n * k / 16);
	std::vector<uint8_t> h(pb);
	for (auto &b : h) b = (uint8_t)rnd();
	CK(cudaMalloc(&w.p, pb)); CK(cudaMemcpy(w.p, h.data(), pb, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&w.s, sb)); CK(cudaMemset(w.s, 0x38, sb));
	std::vector<float> a((size_t)E, 1.0f);
	CK(cudaMalloc(&w.a, E * 4)); CK(cudaMemcpy(w.a, a.data(), E * 4, cudaMemcpyHostToDevice));
	return w;
}

template <int NST, int MINB>
static void launch_v(const dw &w, const int32_t *ids, int groups, const __nv_bfloat16 *x, int64_t xgs,
		     __nv_bfloat16 *y, int kg, bool pdl)
{
	const int64_t rpb = 16 * (8 / kg);
	const size_t shm = (size_t)8 * NST * 64 * 16 + (size_t)8 * (size_t)(w.k + 8) * 2;
	static bool raised;
	if (!raised) {
		CK(cudaFuncSetAttribute(nvfp4_tc2_kernel<1, __nv_bfloat16, NST, MINB>,
					cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm + 1024));
		raised = true;
	}
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];
	cfg.gridDim = dim3((unsigned)((w.n + rpb - 1) / rpb), (unsigned)groups);
	cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = shm; cfg.stream = st;
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
	CK(cudaLaunchKernelEx(&cfg, nvfp4_tc2_kernel<1, __nv_bfloat16, NST, MINB>,
			      (const uint8_t *)w.p, (const uint8_t *)w.s, (const float *)w.a, ids, x, xgs, 1,
			      w.n, w.k, kg, y, w.n, (int64_t)w.n));
}

typedef void (*lfn)(const dw &, const int32_t *, int, const __nv_bfloat16 *, int64_t, __nv_bfloat16 *, int, bool);

int main(int argc, char **argv)
{
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	unsigned *o; CK(cudaMalloc(&o, 4));
	const bool prof = argc > 1;
	const double CBW = 4266e9;
	if (!prof) {
		printf("empty kernel graph: %.2f us\n", tgraph([&](int) { emptyk<<<1, 32, 0, st>>>(o); }, 400));
		size_t sizes[4] = { 9437184, 12 * 1048576 + 1572864, 286 * 1048576, 64 * 1048576 };
		for (size_t sz : sizes) {
			int nc = (int)((size_t)800 * 1048576 / sz) + 1;
			std::vector<void *> bufs(nc);
			for (auto &b : bufs) { CK(cudaMalloc(&b, sz)); CK(cudaMemset(b, 1, sz)); }
			for (int pdl = 0; pdl < 2; pdl++) {
				double t1 = tgraph([&](int i) { launch_read<1>(bufs[i % nc], sz, o, pdl); }, 200);
				double t2 = tgraph([&](int i) { launch_read<2>(bufs[i % nc], sz, o, pdl); }, 200);
				double t4 = tgraph([&](int i) { launch_read<4>(bufs[i % nc], sz, o, pdl); }, 200);
				double t8 = tgraph([&](int i) { launch_read<8>(bufs[i % nc], sz, o, pdl); }, 200);
				printf("read %7.2f MB pdl=%d: U1 %.2f U2 %.2f U4 %.2f U8 %.2f us; best %.0f GB/s = %.0f%% of copy\n",
				       sz / 1048576.0, pdl, t1, t2, t4, t8,
				       sz / fmin(fmin(t1, t2), fmin(t4, t8)) / 1e3,
				       100.0 * sz / fmin(fmin(t1, t2), fmin(t4, t8)) / 1e-6 / CBW);
			}
			for (auto &b : bufs) cudaFree(b);
		}
	}
	// shapes
	struct shp { const char *name; int64_t n, k; } shapes[2] = { { "in_proj_qkv", 8192, 2048 }, { "lm_head", 248320, 2048 } };
	__nv_bfloat16 *x, *y;
	CK(cudaMalloc(&x, 64 * 2048 * 2)); CK(cudaMemset(x, 0, 64 * 2048 * 2));
	CK(cudaMalloc(&y, 248320 * 8 * 4));
	struct var { const char *nm; lfn f; } vars[] = {
		{ "nst6 minb2", launch_v<6, 2> }, { "nst4 minb3", launch_v<4, 3> }, { "nst4 minb4", launch_v<4, 4> },
		{ "nst3 minb4", launch_v<3, 4> }, { "nst6 minb3", launch_v<6, 3> }, { "nst8 minb2", launch_v<8, 2> },
	};
	const int nv = prof ? 1 : 6;
	for (auto &sh : shapes) {
		size_t bytes = (size_t)(sh.n * sh.k / 2 + sh.n * sh.k / 16);
		int nc = (int)((size_t)800 * 1048576 / bytes) + 1;
		std::vector<dw> ws(nc);
		for (auto &w : ws) w = mk(sh.n, sh.k, 1);
		const int iters = sh.n > 100000 ? 20 : 200;
		for (int v = 0; v < nv; v++)
			for (int kg = 1; kg <= 8; kg *= 2)
				for (int pdl = 0; pdl < 2; pdl++) {
					if (prof && (pdl || kg != (sh.n > 100000 ? 1 : 4))) continue;
					if (prof) { for (int i = 0; i < 3; i++) vars[v].f(ws[i % nc], nullptr, 1, x, 0, y, kg, false); CK(cudaStreamSynchronize(st)); continue; }
					double t = tgraph([&](int i) { vars[v].f(ws[i % nc], nullptr, 1, x, 0, y, kg, pdl); }, iters);
					printf("%-11s %s kg=%d pdl=%d: %8.2f us %5.0f GB/s %3.0f%%\n", sh.name, vars[v].nm, kg, pdl, t,
					       bytes / t / 1e3, 100.0 * bytes / (t * 1e-6) / CBW);
				}
		for (auto &w : ws) { cudaFree(w.p); cudaFree(w.s); cudaFree(w.a); }
		fflush(stdout);
	}
	// MoE layer M=1: 8 experts of 256, gate_up [1024,2048] then down [2048,512]
	{
		dw gu = mk(1024, 2048, 256), dn = mk(2048, 512, 256);
		const int nsets = 64;
		std::vector<int32_t> ids(nsets * 8);
		for (auto &v : ids) v = (int32_t)(rnd() % 256);
		int32_t *did; CK(cudaMalloc(&did, ids.size() * 4)); CK(cudaMemcpy(did, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
		__nv_bfloat16 *h; CK(cudaMalloc(&h, 8 * 1024 * 2)); CK(cudaMemset(h, 0, 8 * 1024 * 2));
		double bytes = 8.0 * (1024 * 2048 / 2 + 1024 * 2048 / 16 + 2048 * 512 / 2 + 2048 * 512 / 16);
		for (int v = 0; v < nv; v++)
			for (int kg = 1; kg <= 4; kg *= 2)
				for (int pdl = 0; pdl < 2; pdl++) {
					if (prof && (pdl || kg != 2)) continue;
					auto layer = [&](int i) {
						vars[v].f(gu, did + (i % nsets) * 8, 8, x, 0, h, kg, pdl);
						vars[v].f(dn, did + (i % nsets) * 8, 8, h, 512, y, kg, pdl);
					};
					if (prof) { for (int i = 0; i < 3; i++) layer(i); CK(cudaStreamSynchronize(st)); continue; }
					double t = tgraph(layer, 200);
					printf("moe M=1     %s kg=%d pdl=%d: %8.2f us %5.0f GB/s %3.0f%%\n", vars[v].nm, kg, pdl, t,
					       bytes / t / 1e3, 100.0 * bytes / (t * 1e-6) / CBW);
				}
	}
	return 0;
}
