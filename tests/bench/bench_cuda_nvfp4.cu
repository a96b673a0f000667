/*
 * bench_cuda_nvfp4.cu - correctness and speed of kernels/nvfp4_*.cu on one
 * GPU. Self-contained (nvcc + cuBLASLt + the plain-C twins in src/), so it
 * builds on a machine without lynn's other dependencies:
 *   sh tests/bench/cuda_nvfp4.sh OUTDIR [--check-only | --time-m1 [--l2-hot] | --time-only]
 *
 * Correctness (every call on fresh random inputs, output poisoned with NaN
 * first): each NVFP4 kernel path and the CPU twin against an f64 reference
 * computed from the format's definition; pass when the relative L2 error and
 * the max error / max |ref| are both <= TOL_F32 (f32 output) or TOL_BF16
 * (bf16 output, whose rounding alone is up to 2^-8 relative: half an ulp of
 * an 8-bit significand).
 * Speed: achieved weight bandwidth against the measured device copy
 * bandwidth, and the time against BF16 cuBLASLt, for the Qwen3.6-35B-A3B
 * shapes at M = 1, 4, 16, 64 (weights cycled through more copies than the
 * L2 holds).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

extern "C" {
#include "lynn/cpu_nvfp4.h"
#include "lynn/nvfp4.h"
}
#include "lynn_cuda.h"

/* Relative error of an f32-output kernel vs the f64 reference: f32
 * accumulation over K <= 2048 terms of exact products stays near 1e-6. */
#define TOL_F32 1e-3
/* bf16 output: the final rounding is up to 2^-8 = 3.9e-3 relative per element. */
#define TOL_BF16 4e-3

#define CK(x)                                                                              \
	do {                                                                               \
		cudaError_t e_ = (x);                                                      \
		if (e_ != cudaSuccess) {                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,         \
				cudaGetErrorString(e_));                                   \
			exit(3);                                                           \
		}                                                                          \
	} while (0)
#define LY(x)                                                                              \
	do {                                                                               \
		struct lynn_err e_ = { 0, { 0 } };                                         \
		int r_ = (x);                                                              \
		if (r_) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, e_.msg); \
			exit(3);                                                           \
		}                                                                          \
	} while (0)

static FILE *jout;
static int n_fail, n_pass;

/* ===== random ===== */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
static float frand(void) { return (float)((rnd() >> 11) * 0x1p-53) * 2.0f - 1.0f; }

static uint16_t bf16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
static float bf16_f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

struct hweight {
	int64_t e, n, k;
	std::vector<uint8_t> packed, scales;
	std::vector<float> alpha;
};

static void make_weight(hweight &w, int64_t e, int64_t n, int64_t k)
{
	w.e = e;
	w.n = n;
	w.k = k;
	w.packed.resize((size_t)(e * n * k / 2));
	w.scales.resize((size_t)(e * n * k / 16));
	w.alpha.resize((size_t)e);
	for (auto &b : w.packed)
		b = (uint8_t)rnd();
	for (auto &s : w.scales)
		s = (uint8_t)(0x20 + rnd() % 0x30); /* 0.125 .. ~7: realistic, finite */
	for (auto &a : w.alpha)
		a = (float)(1e-3 * (1.0 + (rnd() % 1000) / 100.0));
}

struct dweight {
	uint8_t *p, *s;
	float *a;
	struct lynn_cuda_nvfp4_weight v;
};

static dweight upload(const hweight &w)
{
	dweight d;
	CK(cudaMalloc(&d.p, w.packed.size()));
	CK(cudaMalloc(&d.s, w.scales.size()));
	CK(cudaMalloc(&d.a, w.alpha.size() * 4));
	CK(cudaMemcpy(d.p, w.packed.data(), w.packed.size(), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d.s, w.scales.data(), w.scales.size(), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d.a, w.alpha.data(), w.alpha.size() * 4, cudaMemcpyHostToDevice));
	d.v.d_packed = d.p;
	d.v.d_scales = d.s;
	d.v.d_alpha = d.a;
	d.v.n = w.n;
	d.v.k = w.k;
	d.v.n_experts = w.e;
	return d;
}
static void dfree(dweight &d)
{
	cudaFree(d.p);
	cudaFree(d.s);
	cudaFree(d.a);
}

/* f64 reference of row r of expert e against x (k floats). */
static double ref_dot(const hweight &w, int64_t e, int64_t r, const float *x)
{
	const uint8_t *P = &w.packed[(size_t)((e * w.n + r) * (w.k / 2))];
	const uint8_t *S = &w.scales[(size_t)((e * w.n + r) * (w.k / 16))];
	double acc = 0;
	for (int64_t i = 0; i < w.k; i++) {
		uint8_t nib = (i & 1) ? P[i / 2] >> 4 : P[i / 2] & 15;
		acc += (double)lynn_e2m1_to_f32(nib) * (double)lynn_e4m3_to_f32(S[i / 16]) *
		       (double)x[i];
	}
	return acc * (double)w.alpha[(size_t)e];
}

struct errstat {
	double se = 0, sr = 0, maxe = 0, maxr = 0;
	bool bad = false;
	void add(double y, double r)
	{
		if (!isfinite(y))
			bad = true;
		se += (y - r) * (y - r);
		sr += r * r;
		maxe = fmax(maxe, fabs(y - r));
		maxr = fmax(maxr, fabs(r));
	}
	double rel() const { return sr > 0 ? sqrt(se / sr) : sqrt(se); }
	double relmax() const { return maxr > 0 ? maxe / maxr : maxe; }
};

/* lynn_cuda_path values in order, for the printed names */
static const char *const PATH_NAME[LYNN_CUDA_PATH_COUNT] = { "auto", "gemv", "mma", "tc2", "tc3", "tcm" };

static void verdict(const char *what, const errstat &st, double tol)
{
	bool ok = !st.bad && st.rel() <= tol && st.relmax() <= tol;
	printf("%-58s rel_l2 %.2e rel_max %.2e %s\n", what, st.rel(), st.relmax(),
	       ok ? "PASS" : "FAIL");
	fprintf(jout,
		"{\"check\":\"%s\",\"rel_l2\":%.3e,\"rel_max\":%.3e,\"tol\":%.1e,\"nan\":%s,"
		"\"pass\":%s}\n",
		what, st.rel(), st.relmax(), tol, st.bad ? "true" : "false", ok ? "true" : "false");
	ok ? n_pass++ : n_fail++;
}

/* The large-M path: the BF16 dequantization must equal q*s of the format
 * definition bit for bit (it is exact), and dequant + cuBLASLt must match
 * the f64 reference like the other bf16-output paths. */
static void check_blas(int64_t n, int64_t k, int m, struct lynn_cublas *blas)
{
	hweight w;
	make_weight(w, 1, n, k);
	dweight d = upload(w);
	void *dw, *dx, *dy;
	std::vector<uint16_t> wb((size_t)(n * k)), xb((size_t)(m * k)), yb((size_t)(m * n));
	std::vector<float> x(xb.size());
	CK(cudaMalloc(&dw, wb.size() * 2));
	CK(cudaMalloc(&dx, xb.size() * 2));
	CK(cudaMalloc(&dy, yb.size() * 2));
	CK(cudaMemset(dw, 0xff, wb.size() * 2));
	LY(lynn_cuda_nvfp4_dequant_bf16(&d.v, dw, NULL, &e_));
	CK(cudaMemcpy(wb.data(), dw, wb.size() * 2, cudaMemcpyDeviceToHost));
	int64_t wrong = 0;
	for (int64_t i = 0; i < n * k; i++) {
		uint8_t nib = (i & 1) ? w.packed[(size_t)(i / 2)] >> 4 : w.packed[(size_t)(i / 2)] & 15;
		float want = lynn_e2m1_to_f32(nib) * lynn_e4m3_to_f32(w.scales[(size_t)(i / 16)]);
		wrong += bf16_f(wb[(size_t)i]) != want || (want == 0 && (wb[(size_t)i] & 0x7fff));
	}
	printf("%-58s %lld of %lld differ %s\n", "nvfp4 dequant bf16 = q*s bit for bit", (long long)wrong,
	       (long long)(n * k), wrong ? "FAIL" : "PASS");
	fprintf(jout, "{\"check\":\"dequant_bf16\",\"n\":%lld,\"k\":%lld,\"differ\":%lld,\"pass\":%s}\n",
		(long long)n, (long long)k, (long long)wrong, wrong ? "false" : "true");
	wrong ? n_fail++ : n_pass++;
	for (size_t i = 0; i < xb.size(); i++) {
		xb[i] = bf16_bits(frand());
		x[i] = bf16_f(xb[i]);
	}
	CK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemset(dy, 0xff, yb.size() * 2));
	LY(lynn_cuda_nvfp4_gemm_blas(blas, &d.v, dx, m, dw, dy, NULL, &e_));
	CK(cudaMemcpy(yb.data(), dy, yb.size() * 2, cudaMemcpyDeviceToHost));
	errstat st;
	for (int64_t r = rnd() % 7; r < n; r += 7)
		for (int i = 0; i < m; i++)
			st.add(bf16_f(yb[(size_t)(i * n + r)]), ref_dot(w, 0, r, &x[(size_t)(i * k)]));
	char what[128];
	snprintf(what, sizeof what, "nvfp4 dequant+cublaslt bf16 n=%lld k=%lld m=%d", (long long)n,
		 (long long)k, m);
	verdict(what, st, TOL_BF16);
	cudaFree(dw);
	cudaFree(dx);
	cudaFree(dy);
	dfree(d);
}

/* One dense correctness case: all paths, both output types, plus the CPU twin. */
static void check_dense(int64_t n, int64_t k, int m, int64_t sample_rows)
{
	hweight w;
	make_weight(w, 1, n, k);
	dweight d = upload(w);
	std::vector<float> x((size_t)(m * k));
	std::vector<uint16_t> xb(x.size());
	for (size_t i = 0; i < x.size(); i++) {
		xb[i] = bf16_bits(frand());
		x[i] = bf16_f(xb[i]);
	}
	void *dx, *dy;
	CK(cudaMalloc(&dx, xb.size() * 2));
	CK(cudaMalloc(&dy, (size_t)(m * n) * 4));
	CK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
	std::vector<int64_t> rows;
	int64_t step = n / sample_rows > 1 ? n / sample_rows : 1;
	for (int64_t r = rnd() % step; r < n; r += step)
		rows.push_back(r);
	rows.push_back(n - 1);
	std::vector<double> ref(rows.size() * (size_t)m);
	for (size_t ri = 0; ri < rows.size(); ri++)
		for (int i = 0; i < m; i++)
			ref[ri * m + i] = ref_dot(w, 0, rows[ri], &x[(size_t)(i * k)]);

	for (int pi = 0; pi < LYNN_CUDA_PATH_COUNT; pi++) {
		if ((pi == LYNN_CUDA_PATH_MMA && (n % 64 || k % 64)) ||
		    ((pi == LYNN_CUDA_PATH_TC3 || pi == LYNN_CUDA_PATH_TCM) && k % 128))
			continue;
		for (int out = 0; out < 2; out++) {
			std::vector<float> y((size_t)(m * n));
			std::vector<uint16_t> yb((size_t)(m * n));
			CK(cudaMemset(dy, 0xff, (size_t)(m * n) * 4)); /* poison: NaN */
			LY(lynn_cuda_nvfp4_gemm_path(&d.v, dx, m, dy, (enum lynn_cuda_out)out,
						     (enum lynn_cuda_path)pi, NULL, &e_));
			CK(cudaDeviceSynchronize());
			errstat st;
			bool anynan = false;
			if (out == LYNN_CUDA_OUT_F32) {
				CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
				for (float v : y)
					anynan |= !isfinite(v);
				for (size_t ri = 0; ri < rows.size(); ri++)
					for (int i = 0; i < m; i++)
						st.add(y[(size_t)(i * n + rows[ri])], ref[ri * m + i]);
			} else {
				CK(cudaMemcpy(yb.data(), dy, yb.size() * 2, cudaMemcpyDeviceToHost));
				for (uint16_t v : yb)
					anynan |= !isfinite(bf16_f(v));
				for (size_t ri = 0; ri < rows.size(); ri++)
					for (int i = 0; i < m; i++)
						st.add(bf16_f(yb[(size_t)(i * n + rows[ri])]),
						       ref[ri * m + i]);
			}
			st.bad |= anynan;
			char what[128];
			snprintf(what, sizeof what, "nvfp4 %s %s n=%lld k=%lld m=%d", PATH_NAME[pi],
				 out ? "f32" : "bf16", (long long)n, (long long)k, m);
			verdict(what, st, out ? TOL_F32 : TOL_BF16);
		}
	}
	/* the CPU twin on the same rows */
	{
		struct lynn_nvfp4_view v = { w.packed.data(), w.scales.data(), w.alpha[0], n, k };
		std::vector<float> yfull((size_t)(m * n), NAN);
		errstat st;
		for (size_t ri = 0; ri < rows.size(); ri++) {
			lynn_cpu_nvfp4_rows(&v, x.data(), k, m, rows[ri], rows[ri] + 1, yfull.data(), n,
					    false);
			for (int i = 0; i < m; i++)
				st.add(yfull[(size_t)(i * n + rows[ri])], ref[ri * m + i]);
		}
		char what[128];
		snprintf(what, sizeof what, "cpu twin (%s) n=%lld k=%lld m=%d",
			 lynn_cpu_nvfp4_simd() ? "avx2" : "scalar", (long long)n, (long long)k, m);
		verdict(what, st, TOL_F32);
	}
	cudaFree(dx);
	cudaFree(dy);
	dfree(d);
}

static void check_moe(int64_t e, int64_t n, int64_t k, int m, bool shared_x)
{
	hweight w;
	make_weight(w, e, n, k);
	dweight d = upload(w);
	const int nsel = 5;
	int32_t ids[nsel];
	for (int g = 0; g < nsel; g++)
		ids[g] = (int32_t)(rnd() % e);
	ids[3] = ids[0]; /* a repeated expert */
	int64_t xs = shared_x ? 0 : (int64_t)m * k;
	std::vector<float> x((size_t)((shared_x ? 1 : nsel) * m * k));
	std::vector<uint16_t> xb(x.size());
	for (size_t i = 0; i < x.size(); i++) {
		xb[i] = bf16_bits(frand());
		x[i] = bf16_f(xb[i]);
	}
	void *dx, *dy, *did;
	CK(cudaMalloc(&dx, xb.size() * 2));
	CK(cudaMalloc(&dy, (size_t)(nsel * m * n) * 4));
	CK(cudaMalloc(&did, sizeof ids));
	CK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(did, ids, sizeof ids, cudaMemcpyHostToDevice));
	for (int pi = 1; pi < LYNN_CUDA_PATH_COUNT; pi++) {
		if ((pi == LYNN_CUDA_PATH_MMA && (n % 64 || k % 64)) ||
		    (pi == LYNN_CUDA_PATH_TC3 && k % 128) || pi == LYNN_CUDA_PATH_TCM)
			continue; /* (tcm: plain weights only) */
		std::vector<float> y((size_t)(nsel * m * n));
		CK(cudaMemset(dy, 0xff, y.size() * 4));
		LY(lynn_cuda_nvfp4_moe_gemm(&d.v, (const int32_t *)did, nsel, dx, xs, m, dy,
					    LYNN_CUDA_OUT_F32, (enum lynn_cuda_path)pi, NULL, &e_));
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
		errstat st;
		for (int g = 0; g < nsel; g++)
			for (int i = 0; i < m; i++)
				for (int64_t r = 0; r < n; r++)
					st.add(y[(size_t)((g * m + i) * n + r)],
					       ref_dot(w, ids[g], r,
						       &x[(size_t)(g * xs + i * k)]));
		char what[128];
		snprintf(what, sizeof what, "moe %s E=%lld n=%lld k=%lld m=%d x=%s", PATH_NAME[pi], (long long)e, (long long)n, (long long)k, m,
			 shared_x ? "shared" : "per-expert");
		verdict(what, st, TOL_F32);
	}
	cudaFree(dx);
	cudaFree(dy);
	cudaFree(did);
	dfree(d);
}

/* The expert MLP (lynn_cuda_nvfp4_moe_mlp): the fused activation against
 * silu(gate) * up of the f64 reference (bf16 tolerance), then the down
 * product against the f64 reference over the activation the kernel wrote
 * (so that its bf16 rounding is not counted twice). */
static void check_moe_mlp(int64_t e, int64_t h, int64_t inter, int m, bool shared_x, int nsel = 5)
{
	hweight gu, dn;
	make_weight(gu, e, 2 * inter, h);
	make_weight(dn, e, h, inter);
	dweight dgu = upload(gu), ddn = upload(dn);
	std::vector<int32_t> ids((size_t)nsel);
	for (int g = 0; g < nsel; g++)
		ids[(size_t)g] = (int32_t)(rnd() % e);
	ids[3] = ids[0]; /* a repeated expert */
	const int64_t xs = shared_x ? 0 : (int64_t)m * h;
	std::vector<float> x((size_t)((shared_x ? 1 : nsel) * m * h));
	std::vector<uint16_t> xb(x.size()), ab((size_t)(nsel * m * inter));
	for (size_t i = 0; i < x.size(); i++) {
		xb[i] = bf16_bits(frand());
		x[i] = bf16_f(xb[i]);
	}
	std::vector<float> y((size_t)(nsel * m * h)), act(ab.size());
	void *dx, *da, *dy, *did;
	CK(cudaMalloc(&dx, xb.size() * 2));
	CK(cudaMalloc(&da, ab.size() * 2));
	CK(cudaMalloc(&dy, y.size() * 4));
	CK(cudaMalloc(&did, ids.size() * 4));
	CK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(did, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemset(da, 0xff, ab.size() * 2)); /* poison: NaN */
	CK(cudaMemset(dy, 0xff, y.size() * 4));
	LY(lynn_cuda_nvfp4_moe_mlp(&dgu.v, &ddn.v, (const int32_t *)did, nsel, dx, xs, m, da, dy,
				   LYNN_CUDA_OUT_F32, NULL, &e_));
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(ab.data(), da, ab.size() * 2, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
	errstat sa, sy;
	for (int g = 0; g < nsel; g++)
		for (int i = 0; i < m; i++) {
			const float *xi = &x[(size_t)(g * xs + i * h)];
			float *ai = &act[(size_t)((g * m + i) * inter)];
			for (int64_t r = 0; r < inter; r++) {
				const double gate = ref_dot(gu, ids[g], r, xi), up = ref_dot(gu, ids[g], inter + r, xi);
				ai[r] = bf16_f(ab[(size_t)((g * m + i) * inter + r)]);
				sa.add(ai[r], gate / (1.0 + exp(-gate)) * up);
			}
			for (int64_t r = 0; r < h; r++)
				sy.add(y[(size_t)((g * m + i) * h + r)], ref_dot(dn, ids[g], r, ai));
		}
	char what[128];
	snprintf(what, sizeof what, "moe mlp act bf16 E=%lld h=%lld i=%lld m=%d x=%s slots=%d", (long long)e,
		 (long long)h, (long long)inter, m, shared_x ? "shared" : "per-expert", nsel);
	verdict(what, sa, TOL_BF16);
	snprintf(what, sizeof what, "moe mlp down f32 E=%lld h=%lld i=%lld m=%d slots=%d", (long long)e,
		 (long long)h, (long long)inter, m, nsel);
	verdict(what, sy, TOL_F32);
	cudaFree(dx);
	cudaFree(da);
	cudaFree(dy);
	cudaFree(did);
	dfree(dgu);
	dfree(ddn);
}

/* The linear with its path chosen at run time: on the H200 (cc 9.0) it must
 * take the sm_90 kernels even for a W4A4 weight and match the reference;
 * the native path's plumbing (activation quantizer into the scratch it
 * sizes) runs up to the FP4 GEMM, which must refuse below cc 10. */
static void check_linear(int64_t n, int64_t k, int m, struct lynn_cublas *blas, int cc)
{
	hweight w;
	make_weight(w, 1, n, k);
	dweight d = upload(w);
	std::vector<float> x((size_t)(m * k));
	std::vector<uint16_t> xb(x.size()), yb((size_t)(m * n));
	for (size_t i = 0; i < x.size(); i++) {
		xb[i] = bf16_bits(frand());
		x[i] = bf16_f(xb[i]);
	}
	void *dx, *dy;
	CK(cudaMalloc(&dx, xb.size() * 2));
	CK(cudaMalloc(&dy, yb.size() * 2));
	CK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemset(dy, 0xff, yb.size() * 2));
	struct lynn_cuda_nvfp4_linear l;
	LY(lynn_cuda_nvfp4_linear_init(&l, &d.v, 0.5f, &e_));
	LY(lynn_cuda_nvfp4_linear_run(blas, &l, dx, m, NULL, dy, NULL, &e_));
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(yb.data(), dy, yb.size() * 2, cudaMemcpyDeviceToHost));
	errstat st;
	for (int64_t r = 0; r < n; r++)
		for (int i = 0; i < m; i++)
			st.add(bf16_f(yb[(size_t)(i * n + r)]), ref_dot(w, 0, r, &x[(size_t)(i * k)]));
	st.bad |= (cc >= 100) != (l.native != 0) || l.w_alpha != w.alpha[0];
	char what[128];
	snprintf(what, sizeof what, "linear (cc %d: %s path) n=%lld k=%lld m=%d", cc,
		 l.native ? "native fp4" : "sm_90", (long long)n, (long long)k, m);
	verdict(what, st, TOL_BF16);
	if (cc < 100) { /* the native plumbing, forced */
		struct lynn_cuda_nvfp4_linear f = l;
		f.native = 1;
		CK(cudaMalloc(&f.d_scales_sw, (size_t)lynn_cuda_fp4_swizzled_bytes(n, k)));
		LY(lynn_cuda_fp4_swizzle_scales(d.v.d_scales, n, k, f.d_scales_sw, NULL, &e_));
		void *scr;
		const int64_t sb = lynn_cuda_nvfp4_linear_scratch(&f, m);
		CK(cudaMalloc(&scr, (size_t)sb));
		struct lynn_err e = { 0, { 0 } };
		int rc = lynn_cuda_nvfp4_linear_run(blas, &f, dx, m, scr, dy, NULL, &e);
		bool ok = rc == -LYNN_EUNSUPPORTED && cudaDeviceSynchronize() == cudaSuccess && sb > 0;
		printf("%-58s rc %d (%s) %s\n", "linear native path forced below cc 10: refused", rc,
		       e.msg, ok ? "PASS" : "FAIL");
		ok ? n_pass++ : n_fail++;
		cudaFree(scr);
		lynn_cuda_nvfp4_linear_free(&f);
	}
	lynn_cuda_nvfp4_linear_free(&l);
	cudaFree(dx);
	cudaFree(dy);
	dfree(d);
}

/* The swizzled scale layout and the activation quantizer (the parts of the
 * Blackwell path that run on any GPU). */
static void check_fp4_helpers(void)
{
	const int64_t rows = 200, k = 96; /* pads rows to 256, scale cols 6 -> 8 */
	std::vector<uint8_t> s((size_t)(rows * k / 16));
	for (auto &b : s)
		b = (uint8_t)(1 + rnd() % 0x7e);
	int64_t nb = lynn_cuda_fp4_swizzled_bytes(rows, k);
	uint8_t *ds, *dz;
	CK(cudaMalloc(&ds, s.size()));
	CK(cudaMalloc(&dz, (size_t)nb));
	CK(cudaMemcpy(ds, s.data(), s.size(), cudaMemcpyHostToDevice));
	LY(lynn_cuda_fp4_swizzle_scales(ds, rows, k, dz, NULL, &e_));
	std::vector<uint8_t> z((size_t)nb);
	CK(cudaMemcpy(z.data(), dz, z.size(), cudaMemcpyDeviceToHost));
	int64_t cp = (k / 16 + 3) / 4 * 4, bad = 0;
	for (int64_t r = 0; r < 256; r++)
		for (int64_t c = 0; c < cp; c++) {
			/* weight-formats.md §3.4, written out independently */
			int64_t off = (((r / 128) * (cp / 4) + c / 4) * 32 + r % 32) * 16 +
				      4 * ((r % 128) / 32) + c % 4;
			uint8_t want = (r < rows && c < k / 16) ? s[(size_t)(r * (k / 16) + c)] : 0;
			bad += z[(size_t)off] != want;
		}
	printf("%-58s %lld mismatches %s\n", "fp4 scale swizzle (128x4 atoms)", (long long)bad,
	       bad ? "FAIL" : "PASS");
	fprintf(jout, "{\"check\":\"fp4 swizzle\",\"mismatches\":%lld,\"pass\":%s}\n",
		(long long)bad, bad ? "false" : "true");
	bad ? n_fail++ : n_pass++;

	/* activation quantizer vs the C codecs */
	const int m = 3;
	std::vector<uint16_t> xb((size_t)(m * k));
	for (auto &v : xb)
		v = bf16_bits(frand() * 3.0f);
	float xa = 0.01f;
	void *dx;
	uint8_t *dq, *dqs;
	int64_t qsb = lynn_cuda_fp4_swizzled_bytes(m, k);
	CK(cudaMalloc(&dx, xb.size() * 2));
	CK(cudaMalloc(&dq, (size_t)(m * k / 2)));
	CK(cudaMalloc(&dqs, (size_t)qsb));
	CK(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
	LY(lynn_cuda_fp4_quant_act(dx, m, k, xa, dq, dqs, NULL, &e_));
	std::vector<uint8_t> q((size_t)(m * k / 2)), qs((size_t)qsb);
	CK(cudaMemcpy(q.data(), dq, q.size(), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(qs.data(), dqs, qs.size(), cudaMemcpyDeviceToHost));
	bad = 0;
	for (int r = 0; r < m; r++)
		for (int64_t b = 0; b < k / 16; b++) {
			float v[16], amax = 0;
			for (int j = 0; j < 16; j++) {
				v[j] = bf16_f(xb[(size_t)(r * k + b * 16 + j)]) * (1.0f / xa);
				amax = fmaxf(amax, fabsf(v[j]));
			}
			uint8_t sc = lynn_f32_to_e4m3(fminf(amax / 6.0f, 448.0f));
			float sf = lynn_e4m3_to_f32(sc);
			int64_t off = ((0 * (cp / 4) + b / 4) * 32 + r % 32) * 16 + 4 * ((r % 128) / 32) +
				      b % 4;
			bad += qs[(size_t)off] != sc;
			for (int j = 0; j < 8; j++) {
				uint8_t lo = sf > 0 ? lynn_f32_to_e2m1(v[2 * j] / sf) : 0;
				uint8_t hi = sf > 0 ? lynn_f32_to_e2m1(v[2 * j + 1] / sf) : 0;
				bad += q[(size_t)(r * k / 2 + b * 8 + j)] != (uint8_t)(lo | hi << 4);
			}
		}
	printf("%-58s %lld mismatches %s\n", "fp4 activation quantizer vs C codecs", (long long)bad,
	       bad ? "FAIL" : "PASS");
	fprintf(jout, "{\"check\":\"fp4 quant_act\",\"mismatches\":%lld,\"pass\":%s}\n",
		(long long)bad, bad ? "false" : "true");
	bad ? n_fail++ : n_pass++;
	cudaFree(ds);
	cudaFree(dz);
	cudaFree(dx);
	cudaFree(dq);
	cudaFree(dqs);
}

/* ===== speed ===== */

static double copy_bw(void)
{
	size_t sz = (size_t)1 << 30;
	void *a, *b;
	cudaEvent_t e0, e1;
	float ms;
	CK(cudaMalloc(&a, sz));
	CK(cudaMalloc(&b, sz));
	CK(cudaMemset(a, 1, sz));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 3; i++)
		CK(cudaMemcpyAsync(b, a, sz, cudaMemcpyDeviceToDevice));
	CK(cudaEventRecord(e0));
	for (int i = 0; i < 10; i++)
		CK(cudaMemcpyAsync(b, a, sz, cudaMemcpyDeviceToDevice));
	CK(cudaEventRecord(e1));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	cudaFree(a);
	cudaFree(b);
	return 2.0 * sz * 10 / (ms * 1e-3);
}

static cudaStream_t bst; /* the benchmark stream (graph capture needs one) */

/* Back-to-back launches on bst, CUDA events around `iters` calls. */
template <typename F> static double time_us(F f, int iters)
{
	cudaEvent_t e0, e1;
	float ms;
	for (int i = 0; i < 5; i++)
		f(i);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, bst));
	for (int i = 0; i < iters; i++)
		f(i);
	CK(cudaEventRecord(e1, bst));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CK(cudaGetLastError());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return ms * 1e3 / iters;
}

/* The same `iters` calls captured once into a CUDA graph; the graph is
 * replayed 3 times (1 warm-up) and the mean per call of the last 2 is
 * returned: no CPU launch cost, only the GPU's own gaps between kernels. */
template <typename F> static double time_graph_us(F f, int iters)
{
	cudaGraph_t gr;
	cudaGraphExec_t ge;
	cudaEvent_t e0, e1;
	float ms;
	f(0); /* first call outside the capture (attribute setup) */
	CK(cudaStreamSynchronize(bst));
	CK(cudaStreamBeginCapture(bst, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < iters; i++)
		f(i);
	CK(cudaStreamEndCapture(bst, &gr));
	CK(cudaGraphInstantiate(&ge, gr, 0));
	CK(cudaGraphLaunch(ge, bst));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, bst));
	CK(cudaGraphLaunch(ge, bst));
	CK(cudaGraphLaunch(ge, bst));
	CK(cudaEventRecord(e1, bst));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CK(cudaGetLastError());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(gr);
	return ms * 1e3 / (2.0 * iters);
}

/* The RMSNorm before a projection in a decode step, as the CUDA runner
 * runs it (one block a token row, X as bf16 for the NVFP4 kernel); with
 * TRIGGER it lets a programmatically launched next kernel start at once
 * (lynn_pdl_trigger, as the runner's kernels do), without it the next
 * kernel starts when it ends. */
template <bool TRIGGER>
static __global__ void k_norm_stand_in(const float *x, int64_t k, __nv_bfloat16 *y)
{
	__shared__ float red[32];
	if (TRIGGER)
		asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	const float *xr = x + (int64_t)blockIdx.x * k;
	float ss = 0.0f;
	for (int64_t d = threadIdx.x; d < k; d += blockDim.x)
		ss += xr[d] * xr[d];
	for (int o = 16; o; o >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = ss;
	__syncthreads();
	ss = 0.0f;
	for (int w = 0; w < (int)(blockDim.x >> 5); w++)
		ss += red[w];
	const float rs = rsqrtf(ss / (float)k + 1e-6f);
	for (int64_t d = threadIdx.x; d < k; d += blockDim.x)
		y[(int64_t)blockIdx.x * k + d] = __float2bfloat16(xr[d] * rs);
}

/* --time-m1: timings at M = 1 and 4 only, no checks, no large-M table */
static bool time_small;
/* --l2-hot (with --time-m1): one weight copy and one expert set, so the
 * weights are served from L2: what the kernels cost with no DRAM wait */
static bool l2_hot;

static void *dev_random(size_t bytes)
{
	std::vector<uint8_t> h(bytes);
	for (size_t i = 0; i + 8 <= bytes; i += 8) {
		uint64_t r = rnd();
		memcpy(&h[i], &r, 8);
	}
	void *d;
	CK(cudaMalloc(&d, bytes));
	CK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
	return d;
}

/* bf16 random values in [-1,1] (valid numbers, unlike random bytes) */
static void *dev_bf16(size_t n)
{
	std::vector<uint16_t> h(n);
	for (auto &v : h)
		v = bf16_bits(frand());
	void *d;
	CK(cudaMalloc(&d, n * 2));
	CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
	return d;
}

static void bench_dense(const char *name, int64_t n, int64_t k, double copybw,
			struct lynn_cublas *blas)
{
	const size_t fp4_bytes = (size_t)(n * k / 2 + n * k / 16);
	const size_t bf_bytes = (size_t)(n * k * 2);
	const size_t target = l2_hot ? 1 : (size_t)400 << 20; /* well past the 60 MB L2 */
	int nc4 = (int)((target + fp4_bytes - 1) / fp4_bytes), ncb = (int)((target + bf_bytes - 1) / bf_bytes);
	std::vector<dweight> w4((size_t)nc4);
	std::vector<void *> wb((size_t)ncb);
	hweight hw;
	make_weight(hw, 1, 64, k); /* scales/alpha pattern source only */
	for (int c = 0; c < nc4; c++) {
		w4[c].p = (uint8_t *)dev_random((size_t)(n * k / 2));
		std::vector<uint8_t> s((size_t)(n * k / 16));
		for (auto &b : s)
			b = (uint8_t)(0x20 + rnd() % 0x30);
		CK(cudaMalloc(&w4[c].s, s.size()));
		CK(cudaMemcpy(w4[c].s, s.data(), s.size(), cudaMemcpyHostToDevice));
		CK(cudaMalloc(&w4[c].a, 4));
		CK(cudaMemcpy(w4[c].a, hw.alpha.data(), 4, cudaMemcpyHostToDevice));
		w4[c].v = { w4[c].p, w4[c].s, w4[c].a, n, k, 1 };
	}
	for (int c = 0; c < ncb; c++)
		wb[c] = dev_bf16((size_t)(n * k));
	void *dx = dev_bf16((size_t)(64 * k)), *dy, *dx_big, *dy_big;
	float *dxf; /* the norm stand-in's f32 input row */
	CK(cudaMalloc(&dxf, (size_t)k * sizeof(float)));
	CK(cudaMemset(dxf, 0x3c, (size_t)k * sizeof(float))); /* 0x3c3c3c3c: about 0.0115 */
	CK(cudaMalloc(&dy, (size_t)(64 * n) * 4));
	void *dscr;
	CK(cudaMalloc(&dscr, (size_t)(n * k) * 2));
	CK(cudaMalloc(&dx_big, (size_t)(1024 * k) * 2));
	CK(cudaMemset(dx_big, 0, (size_t)(1024 * k) * 2));
	CK(cudaMalloc(&dy_big, (size_t)(1024 * n) * 2));
	for (int m : { 64, 256, 1024 }) {
		if (time_small)
			break;
		const int it = n > 100000 ? 5 : 50;
		double tq = time_graph_us([&](int i) {
			LY(lynn_cuda_nvfp4_gemm_blas(blas, &w4[(size_t)(i % nc4)].v, dx_big, m, dscr, dy_big,
						     bst, &e_));
		}, it);
		double tk = m == 64 ? time_graph_us([&](int i) {
			LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx_big, m, dy_big,
						     LYNN_CUDA_OUT_BF16, LYNN_CUDA_PATH_AUTO, bst, &e_));
		}, it) : NAN;
		double tb = time_graph_us([&](int i) {
			LY(lynn_cuda_bf16_gemm(blas, wb[(size_t)(i % ncb)], dx_big, m, n, k, dy_big, bst, &e_));
		}, it);
		printf("%-10s M=%-4d graph: nvfp4 dequant+cuBLASLt %8.2f us | auto kernel %8.2f us | bf16 cuBLASLt %8.2f us | %.2fx of bf16\n",
		       name, m, tq, tk, tb, tb / tq);
		fprintf(jout, "{\"bench\":\"%s\",\"m\":%d,\"us_dq_blas_graph\":%.2f,\"us_auto_graph\":%.2f,\"us_bf16_graph\":%.2f}\n",
			name, m, tq, isnan(tk) ? -1.0 : tk, tb);
		fflush(stdout);
	}
	cudaFree(dscr);
	cudaFree(dx_big);
	cudaFree(dy_big);
	int ms[4] = { 1, 4, 16, 64 };
	for (int mi = 0; mi < (time_small ? 2 : 4); mi++) {
		int m = ms[mi];
		double t[LYNN_CUDA_PATH_COUNT], tb, tg, tg2, tgm, tbg;
		const int it = n > 100000 ? 20 : 200;
		for (int p = 0; p < LYNN_CUDA_PATH_COUNT; p++) {
			if ((p == LYNN_CUDA_PATH_MMA && (n % 64 || k % 64)) ||
			    ((p == LYNN_CUDA_PATH_TC3 || p == LYNN_CUDA_PATH_TCM) && k % 128)) {
				t[p] = NAN;
				continue;
			}
			t[p] = time_us([&](int i) {
				LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx, m, dy,
							     LYNN_CUDA_OUT_BF16,
							     (enum lynn_cuda_path)p, bst, &e_));
			}, it);
		}
		tg = time_graph_us([&](int i) {
			LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx, m, dy,
						     LYNN_CUDA_OUT_BF16, LYNN_CUDA_PATH_AUTO, bst, &e_));
		}, it);
		tg2 = time_graph_us([&](int i) {
			LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx, m, dy,
						     LYNN_CUDA_OUT_BF16, LYNN_CUDA_PATH_TC2, bst, &e_));
		}, it);
		tgm = k % 128 ? NAN : time_graph_us([&](int i) {
			LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx, m, dy,
						     LYNN_CUDA_OUT_BF16, LYNN_CUDA_PATH_TCM, bst, &e_));
		}, it);
		tb = time_us([&](int i) {
			LY(lynn_cuda_bf16_gemm(blas, wb[(size_t)(i % ncb)], dx, m, n, k, dy, bst, &e_));
		}, it);
		tbg = time_graph_us([&](int i) {
			LY(lynn_cuda_bf16_gemm(blas, wb[(size_t)(i % ncb)], dx, m, n, k, dy, bst, &e_));
		}, it);
		double bw = fp4_bytes / (t[0] * 1e-6), bwg = fp4_bytes / (tg * 1e-6);
		printf("%-10s M=%-3d b2b: nvfp4 auto %8.2f us (gemv %7.1f mma %7.1f tc2 %7.2f tc3 %7.2f "
		       "tcm %7.2f) %5.0f GB/s = %3.0f%% of copy | bf16 cuBLASLt %7.2f us (%5.0f GB/s) | "
		       "%.2fx\n",
		       name, m, t[0], t[1], t[2], t[3], t[4], t[5], bw / 1e9, 100 * bw / copybw, tb,
		       bf_bytes / (tb * 1e-6) / 1e9, tb / t[0]);
		printf("%-10s M=%-3d graph: nvfp4 auto %8.2f us %5.0f GB/s = %3.0f%% of copy (tc2 %.2f us "
		       "%3.0f%%, tcm %.2f us %3.0f%%) | bf16 cuBLASLt %7.2f us (%5.0f GB/s) | %.2fx\n",
		       name, m, tg, bwg / 1e9, 100 * bwg / copybw, tg2,
		       100 * fp4_bytes / (tg2 * 1e-6) / copybw, tgm,
		       100 * fp4_bytes / (tgm * 1e-6) / copybw, tbg, bf_bytes / (tbg * 1e-6) / 1e9,
		       tbg / tg);
		fprintf(jout,
			"{\"bench\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":%d,\"us_auto\":%.2f,"
			"\"us_gemv\":%.2f,\"us_mma\":%.2f,"
			"\"us_tc2\":%.2f,\"us_tc3\":%.2f,\"us_tcm\":%.2f,\"us_bf16\":%.2f,\"gbps\":%.1f,"
			"\"frac_copy\":%.3f,\"speedup\":%.3f,\"us_auto_graph\":%.2f,\"us_tc2_graph\":%.2f,"
			"\"us_tcm_graph\":%.2f,\"us_bf16_graph\":%.2f,"
			"\"frac_copy_graph\":%.3f,\"speedup_graph\":%.3f}\n",
			name, (long long)n, (long long)k, m, t[0], t[1], isnan(t[2]) ? -1.0 : t[2], t[3],
			isnan(t[4]) ? -1.0 : t[4], isnan(t[5]) ? -1.0 : t[5], tb, bw / 1e9, bw / copybw,
			tb / t[0], tg, tg2, isnan(tgm) ? -1.0 : tgm, tbg, bwg / copybw, tbg / tg);
		if (m == 1 && n < 100000) {
			/* In its place in a decode step: after the RMSNorm that
			 * writes its X. With the norm's trigger, the projection's
			 * weight loads overlap the norm; its share of the pair is
			 * the pair's time less the norm's alone. */
			auto pair = [&](bool trig) {
				return time_graph_us([&](int i) {
					if (trig)
						k_norm_stand_in<true><<<1, 256, 0, bst>>>(dxf, k, (__nv_bfloat16 *)dx);
					else
						k_norm_stand_in<false><<<1, 256, 0, bst>>>(dxf, k, (__nv_bfloat16 *)dx);
					LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx, m, dy,
								     LYNN_CUDA_OUT_BF16, LYNN_CUDA_PATH_AUTO,
								     bst, &e_));
				}, it);
			};
			const double tn = time_graph_us([&](int) {
				k_norm_stand_in<true><<<1, 256, 0, bst>>>(dxf, k, (__nv_bfloat16 *)dx);
			}, it);
			const double tp0 = pair(false), tp1 = pair(true);
			printf("%-10s M=1 after a norm kernel, graph: norm alone %.2f us; norm + nvfp4 %.2f us "
			       "(no trigger), %.2f us (trigger): the product's share %.2f us (%3.0f%% of copy), "
			       "%.2f us (%3.0f%%)\n",
			       name, tn, tp0, tp1, tp0 - tn, 100 * fp4_bytes / ((tp0 - tn) * 1e-6) / copybw,
			       tp1 - tn, 100 * fp4_bytes / ((tp1 - tn) * 1e-6) / copybw);
			fprintf(jout, "{\"bench\":\"%s_after_norm\",\"m\":1,\"us_norm\":%.2f,\"us_pair\":%.2f,"
				"\"us_pair_trigger\":%.2f,\"frac_copy_share_trigger\":%.3f}\n",
				name, tn, tp0, tp1, fp4_bytes / ((tp1 - tn) * 1e-6) / copybw);
		}
		if (m <= 4)
			for (int kg = 1; kg <= 8; kg *= 2) {
				lynn_cuda_nvfp4_tc_tune(kg);
				auto f = [&](int i) {
					LY(lynn_cuda_nvfp4_gemm_path(&w4[(size_t)(i % nc4)].v, dx, m, dy,
								     LYNN_CUDA_OUT_BF16, LYNN_CUDA_PATH_TC3,
								     bst, &e_));
				};
				double a = time_us(f, it), b = time_graph_us(f, it);
				printf("  sweep %s M=%d tc3 kgroups=%d: b2b %.2f us (%3.0f%%) graph %.2f us (%3.0f%%)\n",
				       name, m, kg, a, 100 * fp4_bytes / (a * 1e-6) / copybw, b,
				       100 * fp4_bytes / (b * 1e-6) / copybw);
				lynn_cuda_nvfp4_tc_tune(0);
			}
		fflush(stdout);
	}
	for (auto &d : w4)
		dfree(d);
	for (void *p : wb)
		cudaFree(p);
	cudaFree(dx);
	cudaFree(dxf);
	cudaFree(dy);
}

/* One MoE layer's routed experts: gate_up (2048 -> 2x512) then down
 * (512 -> 2048) over the U experts a batch of M tokens selects (uniform
 * routing: U = 8, 30, 102, 222; performance-anchors.md §4), each expert
 * seeing round(8M/U) tokens. */
/* A DeltaNet layer's input projections of Qwen3.6-35B-A3B (2048 -> qkv
 * 8192, z 4096, b 32, a 32) as the CUDA runner runs them in a decode step:
 * stacked, one launch over 386 chunks of 32 rows
 * (lynn_cuda_nvfp4_stacked_gemm), against the four products one after
 * another (AUTO each); graph timings, the weights cycled past L2 as in
 * bench_dense, and the stacked launch after the norm stand-in as there. */
static void bench_stacked(double copybw)
{
	const int64_t K = 2048, rows[4] = { 8192, 4096, 32, 32 }, N = 12352, CH = 32;
	const size_t bytes = (size_t)(N * K / 2 + N * K / 16);
	const size_t target = l2_hot ? 1 : (size_t)400 << 20;
	const int nc = (int)((target + bytes - 1) / bytes), it = 200;
	struct set {
		struct lynn_cuda_nvfp4_weight all, part[4];
	};
	std::vector<set> w((size_t)nc);
	std::vector<float> al((size_t)(N / CH), 0.0115f);
	for (int c = 0; c < nc; c++) {
		uint8_t *p = (uint8_t *)dev_random((size_t)(N * K / 2)), *sc;
		std::vector<uint8_t> hs((size_t)(N * K / 16));
		for (auto &b : hs)
			b = (uint8_t)(0x20 + rnd() % 0x30);
		float *a;
		CK(cudaMalloc(&sc, hs.size()));
		CK(cudaMemcpy(sc, hs.data(), hs.size(), cudaMemcpyHostToDevice));
		CK(cudaMalloc(&a, al.size() * sizeof(float)));
		CK(cudaMemcpy(a, al.data(), al.size() * sizeof(float), cudaMemcpyHostToDevice));
		w[(size_t)c].all = { p, sc, a, CH, K, N / CH };
		for (int64_t j = 0, r0 = 0; j < 4; r0 += rows[j++])
			w[(size_t)c].part[j] = { p + r0 * K / 2, sc + r0 * K / 16, a + r0 / CH, rows[j], K, 1 };
	}
	void *dx = dev_bf16((size_t)(16 * K)), *dy;
	float *dxf;
	CK(cudaMalloc(&dxf, (size_t)K * sizeof(float)));
	CK(cudaMemset(dxf, 0x3c, (size_t)K * sizeof(float)));
	CK(cudaMalloc(&dy, (size_t)(16 * N) * 4));
	for (int m : { 1, 4 }) {
		const double ts = time_graph_us([&](int i) {
			LY(lynn_cuda_nvfp4_stacked_gemm(&w[(size_t)(i % nc)].all, dx, m, dy, LYNN_CUDA_OUT_F32, bst,
							&e_));
		}, it);
		const double t4 = time_graph_us([&](int i) {
			float *y = (float *)dy;
			for (int j = 0; j < 4; y += m * rows[j++])
				LY(lynn_cuda_nvfp4_gemm(&w[(size_t)(i % nc)].part[j], dx, m, y, LYNN_CUDA_OUT_F32, bst,
							&e_));
		}, it);
		const double tn = time_graph_us([&](int) {
			k_norm_stand_in<true><<<1, 256, 0, bst>>>(dxf, K, (__nv_bfloat16 *)dx);
		}, it);
		const double tp = time_graph_us([&](int i) {
			k_norm_stand_in<true><<<1, 256, 0, bst>>>(dxf, K, (__nv_bfloat16 *)dx);
			LY(lynn_cuda_nvfp4_stacked_gemm(&w[(size_t)(i % nc)].all, dx, m, dy, LYNN_CUDA_OUT_F32, bst,
							&e_));
		}, it);
		auto pc = [&](double us) { return 100 * bytes / (us * 1e-6) / copybw; };
		printf("deltanet_in M=%d graph: stacked %.2f us (%3.0f%% of copy) | 4 launches %.2f us (%3.0f%%) | "
		       "after a norm kernel (trigger): the stacked product's share %.2f us (%3.0f%%)\n",
		       m, ts, pc(ts), t4, pc(t4), tp - tn, pc(tp - tn));
		fprintf(jout, "{\"bench\":\"deltanet_in\",\"m\":%d,\"bytes\":%zu,\"us_stacked_graph\":%.2f,"
			"\"us_four_graph\":%.2f,\"us_norm\":%.2f,\"us_pair_trigger\":%.2f,"
			"\"frac_copy_stacked\":%.3f}\n", m, bytes, ts, t4, tn, tp, pc(ts) / 100);
		fflush(stdout);
	}
	for (auto &c : w) {
		cudaFree((void *)c.all.d_packed);
		cudaFree((void *)c.all.d_scales);
		cudaFree((void *)c.all.d_alpha);
	}
	cudaFree(dx);
	cudaFree(dxf);
	cudaFree(dy);
}

static void bench_moe(double copybw, struct lynn_cublas *blas)
{
	const int64_t E = 256, H = 2048, I = 512;
	const size_t gu4 = (size_t)(2 * I * H / 2 + 2 * I * H / 16), dn4 = (size_t)(H * I / 2 + H * I / 16);
	hweight dummy;
	make_weight(dummy, E, 1, 32);
	dweight gu, dn;
	gu.p = (uint8_t *)dev_random((size_t)(E * 2 * I * H / 2));
	gu.s = (uint8_t *)dev_random((size_t)(E * 2 * I * H / 16));
	dn.p = (uint8_t *)dev_random((size_t)(E * H * I / 2));
	dn.s = (uint8_t *)dev_random((size_t)(E * H * I / 16));
	/* random scale bytes may be NaN codes: clear the high bit pattern to
	 * keep timing data finite (values do not matter for timing) */
	CK(cudaMemset(gu.s, 0x38, (size_t)(E * 2 * I * H / 16)));
	CK(cudaMemset(dn.s, 0x38, (size_t)(E * H * I / 16)));
	CK(cudaMalloc(&gu.a, E * 4));
	CK(cudaMalloc(&dn.a, E * 4));
	CK(cudaMemcpy(gu.a, dummy.alpha.data(), E * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dn.a, dummy.alpha.data(), E * 4, cudaMemcpyHostToDevice));
	gu.v = { gu.p, gu.s, gu.a, 2 * I, H, E };
	dn.v = { dn.p, dn.s, dn.a, H, I, E };
	void *bgu = dev_bf16((size_t)(E * 2 * I * H)), *bdn = dev_bf16((size_t)(E * H * I));
	void *dx = dev_bf16((size_t)(64 * 8 * H)), *dh = dev_bf16((size_t)(64 * 8 * 2 * I)), *dy;
	CK(cudaMalloc(&dy, (size_t)(64 * 8 * H) * 4));
	/* U = 9 at M = 1: the CUDA runner's call, the shared expert as one
	 * more expert of the banks beside the 8 routed ones */
	int ms[5] = { 1, 1, 4, 16, 64 }, us[5] = { 8, 9, 30, 102, 222 };
	const int nsets = l2_hot ? 1 : 16;
	for (int mi = 0; mi < (time_small ? 3 : 5); mi++) {
		int m = ms[mi], u = us[mi];
		int t = (int)lround(8.0 * m / u);
		if (t < 1)
			t = 1;
		std::vector<int32_t> ids((size_t)(nsets * u));
		std::vector<std::vector<int32_t>> hsets((size_t)nsets);
		for (int s = 0; s < nsets; s++) {
			std::vector<int32_t> perm((size_t)E);
			for (int i = 0; i < E; i++)
				perm[(size_t)i] = i;
			for (int i = 0; i < u; i++) {
				int j = i + (int)(rnd() % (uint64_t)(E - i));
				std::swap(perm[(size_t)i], perm[(size_t)j]);
				ids[(size_t)(s * u + i)] = perm[(size_t)i];
			}
			hsets[(size_t)s].assign(perm.begin(), perm.begin() + u);
		}
		int32_t *did;
		CK(cudaMalloc(&did, ids.size() * 4));
		CK(cudaMemcpy(did, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
		double tp[LYNN_CUDA_PATH_COUNT], tpg, tpg2;
		auto layer = [&](int i, int p) {
			const int32_t *sel = did + (i % nsets) * u;
			LY(lynn_cuda_nvfp4_moe_gemm(&gu.v, sel, u, dx, m == 1 ? 0 : (int64_t)t * H, t, dh,
						    LYNN_CUDA_OUT_BF16, (enum lynn_cuda_path)p, bst, &e_));
			LY(lynn_cuda_nvfp4_moe_gemm(&dn.v, sel, u, dh, (int64_t)t * I, t, dy,
						    LYNN_CUDA_OUT_BF16, (enum lynn_cuda_path)p, bst, &e_));
		};
		for (int p = 0; p < LYNN_CUDA_PATH_COUNT; p++)
			tp[p] = p == LYNN_CUDA_PATH_TCM ? NAN : time_us([&](int i) { layer(i, p); }, 100);
		tpg = time_graph_us([&](int i) { layer(i, 0); }, 100);
		/* the expert MLP call: silu(gate) * up fused, down's loads early */
		auto mlp = [&](int i) {
			LY(lynn_cuda_nvfp4_moe_mlp(&gu.v, &dn.v, did + (i % nsets) * u, u, dx,
						   m == 1 ? 0 : (int64_t)t * H, t, dh, dy,
						   LYNN_CUDA_OUT_BF16, bst, &e_));
		};
		const double tm = time_us(mlp, 100), tmg = time_graph_us(mlp, 100);
		tpg2 = time_graph_us([&](int i) { layer(i, LYNN_CUDA_PATH_TC2); }, 100);
		double tb = time_us([&](int i) {
			const std::vector<int32_t> &set = hsets[(size_t)(i % nsets)];
			for (int g = 0; g < u; g++) {
				const char *wg = (const char *)bgu + (size_t)set[(size_t)g] * 2 * I * H * 2;
				const char *wd = (const char *)bdn + (size_t)set[(size_t)g] * H * I * 2;
				LY(lynn_cuda_bf16_gemm(blas, wg, (const char *)dx + (size_t)(m == 1 ? 0 : g * t * H) * 2,
						       t, 2 * I, H, (char *)dh + (size_t)g * t * 2 * I * 2,
						       bst, &e_));
				LY(lynn_cuda_bf16_gemm(blas, wd, (const char *)dh + (size_t)g * t * I * 2, t, H, I,
						       (char *)dy + (size_t)g * t * H * 2, bst, &e_));
			}
		}, 10);
		double bytes = (double)u * (gu4 + dn4);
		double bw = bytes / (tp[0] * 1e-6), bwg = bytes / (tpg * 1e-6);
		printf("moe M=%-3d U=%-3d t=%d b2b: nvfp4 auto %8.2f us (gemv %7.1f mma %7.1f tc2 %7.2f "
		       "tc3 %7.2f) %5.0f GB/s = %3.0f%% of copy | bf16 cuBLASLt per-expert %8.1f us | "
		       "%.2fx\n",
		       m, u, t, tp[0], tp[1], tp[2], tp[3], tp[4], bw / 1e9, 100 * bw / copybw, tb,
		       tb / tp[0]);
		printf("moe M=%-3d U=%-3d t=%d graph: nvfp4 auto %8.2f us %5.0f GB/s = %3.0f%% of copy "
		       "(tc2 %.2f us %3.0f%%)\n",
		       m, u, t, tpg, bwg / 1e9, 100 * bwg / copybw, tpg2,
		       100 * bytes / (tpg2 * 1e-6) / copybw);
		printf("moe M=%-3d U=%-3d t=%d expert MLP call (activation fused): b2b %8.2f us (%3.0f%%) "
		       "graph %8.2f us (%3.0f%%)\n",
		       m, u, t, tm, 100 * bytes / (tm * 1e-6) / copybw, tmg,
		       100 * bytes / (tmg * 1e-6) / copybw);
		fprintf(jout,
			"{\"bench\":\"moe\",\"m\":%d,\"experts\":%d,\"tokens_per_expert\":%d,"
			"\"us_auto\":%.2f,\"us_gemv\":%.2f,\"us_mma\":%.2f,"
			"\"us_tc2\":%.2f,\"us_tc3\":%.2f,\"us_bf16_loop\":%.2f,"
			"\"gbps\":%.1f,\"frac_copy\":%.3f,\"speedup\":%.3f,\"us_auto_graph\":%.2f,"
			"\"us_tc2_graph\":%.2f,\"frac_copy_graph\":%.3f,\"us_mlp\":%.2f,"
			"\"us_mlp_graph\":%.2f,\"frac_copy_mlp_graph\":%.3f}\n",
			m, u, t, tp[0], tp[1], tp[2], tp[3], tp[4], tb, bw / 1e9, bw / copybw,
			tb / tp[0], tpg, tpg2, bwg / copybw, tm, tmg, bytes / (tmg * 1e-6) / copybw);
		if (m == 1)
			for (int kg = 1; kg <= 8; kg *= 2) {
				lynn_cuda_nvfp4_tc_tune(kg);
				double a = time_us([&](int i) { layer(i, LYNN_CUDA_PATH_TC3); }, 100);
				double b = time_graph_us([&](int i) { layer(i, LYNN_CUDA_PATH_TC3); }, 100);
				double c = time_graph_us(mlp, 100);
				printf("  sweep moe M=1 U=%d tc3 kgroups=%d: b2b %.2f us (%3.0f%%) graph %.2f us (%3.0f%%); "
				       "expert MLP call graph %.2f us (%3.0f%%)\n",
				       u, kg, a, 100 * bytes / (a * 1e-6) / copybw, b,
				       100 * bytes / (b * 1e-6) / copybw, c, 100 * bytes / (c * 1e-6) / copybw);
				lynn_cuda_nvfp4_tc_tune(0);
			}
		fflush(stdout);
		cudaFree(did);
	}
	dfree(gu);
	dfree(dn);
	cudaFree(bgu);
	cudaFree(bdn);
	cudaFree(dx);
	cudaFree(dh);
	cudaFree(dy);
}

int main(int argc, char **argv)
{
	const char *out = argc > 1 ? argv[1] : ".";
	char path[1024];
	cudaDeviceProp prop;
	/* --check-small: the small-shape checks only (for compute-sanitizer's
	 * slower tools: racecheck, synccheck) */
	const bool small = argc > 2 && !strcmp(argv[2], "--check-small");
	bool quick = small || (argc > 2 && !strcmp(argv[2], "--check-only"));
	time_small = argc > 2 && !strcmp(argv[2], "--time-m1");
	const bool time_all = argc > 2 && !strcmp(argv[2], "--time-only");
	l2_hot = time_small && argc > 3 && !strcmp(argv[3], "--l2-hot");

	snprintf(path, sizeof path, "%s/bench_cuda_nvfp4.jsonl", out);
	jout = fopen(path, "w");
	if (!jout) {
		perror(path);
		return 3;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, cc %d.%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor,
	       prop.multiProcessorCount, prop.l2CacheSize >> 20);
	fprintf(jout, "{\"device\":\"%s\",\"cc\":%d}\n", prop.name, prop.major * 10 + prop.minor);

	/* correctness (not with --time-m1 or --time-only) */
	if (!time_small && !time_all) {
		int mlist[] = { 1, 2, 3, 5, 8, 16, 17, 33, 64, 65 };
		for (int m : mlist)
			check_dense(128, 256, m, 1 << 30);
		check_dense(192, 96, 3, 1 << 30);   /* K % 64 != 0: gemv only */
		check_dense(64, 32, 2, 1 << 30);    /* smallest K */
		check_dense(100, 160, 5, 1 << 30);  /* N % 16 != 0, K not a whole 128-span */
		check_dense(64, 4096, 3, 1 << 30);  /* tc2: 4 laps of its ring; tc3: 4 spans a warp */
		check_dense(100, 384, 5, 1 << 30);  /* tc3: N % 16 != 0, 3 spans split unevenly over K groups */
		check_dense(25600, 768, 2, 512);    /* tc3: 6 spans a warp, its 4-span window refilled twice */
		check_dense(100, 384, 40, 1 << 30); /* tcm: 3 spans over a cluster of 2, 5 token tiles */
		check_dense(300, 4096, 24, 1 << 30); /* tcm: a cluster of 8, 4 spans a block */
		for (int m : { 1, 4, 16, 64 }) {
			if (small)
				break;
			check_dense(8192, 2048, m, 512);
			check_dense(1024, 2048, m, 512);
			check_dense(2048, 512, m, 512);
			check_dense(248320, 2048, m, 256);
		}
		check_moe(8, 128, 256, 1, true);
		check_moe(8, 128, 256, 3, false);
		check_moe(16, 64, 512, 17, false);
		check_moe_mlp(8, 256, 128, 1, true);
		check_moe_mlp(8, 256, 128, 3, false);
		check_moe_mlp(8, 384, 256, 17, false); /* three token tiles of 8 */
		check_moe_mlp(8, 256, 128, 65, false); /* two passes of 64 tokens */
		check_moe_mlp(16, 2048, 512, 1, true);  /* the model's shapes */
		check_moe_mlp(16, 2048, 512, 4, false);
		check_moe_mlp(16, 2048, 512, 1, true, 9); /* 288 gate/up blocks: 3 a multiprocessor */
		check_fp4_helpers();
		{
			struct lynn_err e = { 0, { 0 } };
			struct lynn_cublas *b = lynn_cuda_blas_create(&e);
			if (!b) {
				fprintf(stderr, "%s\n", e.msg);
				return 3;
			}
			check_blas(256, 512, 64, b);
			check_blas(1000, 2048, 300, b); /* N not a multiple of anything, M in the hundreds */
			check_linear(256, 512, 1, b, prop.major * 10 + prop.minor);
			check_linear(1024, 2048, 5, b, prop.major * 10 + prop.minor);
			int rc = b ? lynn_cuda_fp4_gemm(b, NULL, NULL, NULL, NULL, 1.0f, 1, 64, 64, NULL, NULL, &e) : -1;
			bool ok = prop.major >= 10 || rc == -LYNN_EUNSUPPORTED;
			printf("%-58s rc %d (%s) %s\n", "fp4 gemm refused below cc 10", rc, e.msg,
			       ok ? "PASS" : "FAIL");
			ok ? n_pass++ : n_fail++;
			lynn_cuda_blas_free(b);
		}
	}
	printf("correctness: %d passed, %d failed\n", n_pass, n_fail);
	fprintf(jout, "{\"correctness_pass\":%d,\"correctness_fail\":%d}\n", n_pass, n_fail);
	fflush(stdout);
	if (!quick) {
		struct lynn_err e = { 0, { 0 } };
		struct lynn_cublas *blas = lynn_cuda_blas_create(&e);
		double cbw = copy_bw();
		CK(cudaStreamCreateWithFlags(&bst, cudaStreamNonBlocking));
		if (!blas) {
			fprintf(stderr, "%s\n", e.msg);
			return 3;
		}
		printf("copy bandwidth (read+write): %.0f GB/s\n", cbw / 1e9);
		fprintf(jout, "{\"copy_gbps\":%.1f}\n", cbw / 1e9);
		bench_dense("in_proj_qkv", 8192, 2048, cbw, blas);
		bench_stacked(cbw);
		bench_moe(cbw, blas);
		bench_dense("lm_head", 248320, 2048, cbw, blas);
		lynn_cuda_blas_free(blas);
	}
	fclose(jout);
	return n_fail ? 1 : 0;
}
