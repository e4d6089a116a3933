// SPDX-License-Identifier: MIT
//
// The emulation's runtime (cuda_emu.h): blocks run one after another; the
// threads of a block are fibers (ucontext) that a scheduler resumes in turn,
// each running until it waits for its warp or returns. A warp's collective
// operations wait for all 32 lanes: a lane that returns while the others of
// its warp wait, or a block in which no thread can go on, is a kernel bug and
// aborts with a message. Under AddressSanitizer the fiber switches are
// announced to it, so that it checks the fibers' stacks as stacks.
#include <assert.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "cuda_emu.h"
#include "../attend_abi.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/* a kernel's frame is a few KiB (ASan's redzones included); each switch under ASan costs this */
#define STACK_BYTES (128u << 10)
#define GUARD_BYTES 4096u
#define MAX_THREADS 1024

namespace {

struct emu_thread {
	ucontext_t ctx;
	emu_dim3 idx;
	bool done;
	void *stack;
};

struct emu_warp {
	unsigned arrived, gen, lanes;
	uint64_t slot[32];
	struct {
		uint32_t a[4], b[2];
	} frag[32];
};

struct emu_state {
	emu_thread threads[MAX_THREADS];
	emu_warp warps[MAX_THREADS / 32];
	unsigned nthreads;
	emu_thread *cur;
	emu_dim3 block;
	ucontext_t sched;
	uint64_t progress;        // barriers passed and threads ended: a pass without is a deadlock
	void *smem;
	emu_kernel_fn *fn;
	const kvg_attend_args *args;
#ifdef EMU_ASAN
	const void *sched_bottom; // the scheduler's stack, as the fibers' first switch reports it
	size_t sched_size;
#endif
};

emu_state st;

[[noreturn]] void die(const char *why)
{
	fprintf(stderr, "cuda emulation: block %u thread %u: %s\n", st.block.x,
		st.cur ? st.cur->idx.x : 0, why);
	abort();
}

// From the current fiber back to the scheduler; @last: the fiber has returned.
void to_scheduler(bool last)
{
#ifdef EMU_ASAN
	void *fake = nullptr;

	__sanitizer_start_switch_fiber(last ? nullptr : &fake, st.sched_bottom, st.sched_size);
	swapcontext(&st.cur->ctx, &st.sched);
	__sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
	(void)last;
	swapcontext(&st.cur->ctx, &st.sched);
#endif
}

void fiber_entry(void)
{
#ifdef EMU_ASAN
	__sanitizer_finish_switch_fiber(nullptr, &st.sched_bottom, &st.sched_size);
#endif
	st.fn(*st.args);
	emu_warp &w = st.warps[st.cur->idx.x / 32];

	if (w.arrived)
		die("returned while its warp waits for it in a collective operation");
	w.lanes--;
	st.cur->done = true;
	st.progress++;
	to_scheduler(true);
	die("a returned fiber was resumed");
}

// One scheduler turn of thread @t.
void resume(emu_thread *t)
{
	st.cur = t;
#ifdef EMU_ASAN
	void *fake = nullptr;

	__sanitizer_start_switch_fiber(&fake, t->stack, STACK_BYTES);
	swapcontext(&st.sched, &t->ctx);
	__sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
	swapcontext(&st.sched, &t->ctx);
#endif
	st.cur = nullptr;
}

// A fresh fiber for thread @i. Alone in its function: getcontext returns twice.
__attribute__((noinline)) void fiber_init(emu_thread *t, unsigned i)
{
	t->idx = emu_dim3{ i, 0, 0 };
	t->done = false;
	if (!t->stack) {
		/* a page below it that faults: a kernel whose frame outgrows the stack stops there */
		uint8_t *m = (uint8_t *)mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (m == MAP_FAILED || mprotect(m, GUARD_BYTES, PROT_NONE))
			die("no memory for a fiber's stack");
		t->stack = m + GUARD_BYTES;
	}
	getcontext(&t->ctx);
	t->ctx.uc_stack.ss_sp = t->stack;
	t->ctx.uc_stack.ss_size = STACK_BYTES;
	t->ctx.uc_link = nullptr;
	makecontext(&t->ctx, fiber_entry, 0);
}

void run_block(void)
{
	for (unsigned i = 0; i < st.nthreads; i++)
		fiber_init(&st.threads[i], i);
	for (unsigned w = 0; w < st.nthreads / 32; w++)
		st.warps[w] = emu_warp{ 0, 0, 32, {}, {} };
	for (unsigned left = st.nthreads; left;) {
		uint64_t before = st.progress;

		left = 0;
		for (unsigned i = 0; i < st.nthreads; i++) {
			if (st.threads[i].done)
				continue;
			resume(&st.threads[i]);
			left += !st.threads[i].done;
		}
		if (left && st.progress == before)
			die("deadlock: no thread of the block can go on (a lane missing from a collective)");
	}
}

} // namespace

const emu_dim3 &emu_thread_idx(void)
{
	return st.cur->idx;
}

const emu_dim3 &emu_block_idx(void)
{
	return st.block;
}

void *emu_dynamic_smem(void)
{
	return st.smem;
}

void emu_warp_sync(void)
{
	emu_warp &w = st.warps[st.cur->idx.x / 32];
	unsigned gen = w.gen;

	if (w.lanes != 32)
		die("a collective operation with lanes of its warp gone");
	if (++w.arrived == 32) {
		w.arrived = 0;
		w.gen++;
		st.progress++;
		return;
	}
	while (w.gen == gen)
		to_scheduler(false);
}

uint64_t emu_warp_exchange(uint64_t v, unsigned src_lane)
{
	emu_warp &w = st.warps[st.cur->idx.x / 32];
	uint64_t r;

	w.slot[emu_lane()] = v;
	emu_warp_sync();
	r = w.slot[src_lane % 32];
	emu_warp_sync(); // nobody writes its slot again before everyone has read
	return r;
}

static double half_value(bool bf16, uint32_t reg, int hi)
{
	uint16_t h = (uint16_t)(hi ? reg >> 16 : reg);

	return bf16 ? attn_bf16_to_f32(h) : attn_f16_to_f32(h);
}

// PTX ISA, mma.m16n8k16 with .f16/.bf16 inputs and .f32 accumulators, lane L:
// groupID = L >> 2, threadID_in_group = L % 4;
// A: a_i at row groupID (+8 for i = 2, 3, 6, 7), column 2 * tig + (i & 1) (+8 for i >= 4);
// B: b_i at row 2 * tig + (i & 1) (+8 for i >= 2), column groupID;
// C/D: c_i at row groupID (+8 for i >= 2), column 2 * tig + (i & 1).
void emu_mma16816(bool bf16, float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	emu_warp &w = st.warps[st.cur->idx.x / 32];
	unsigned lane = emu_lane();
	double A[16][16], B[16][8];

	memcpy(w.frag[lane].a, a, sizeof(w.frag[lane].a));
	w.frag[lane].b[0] = b0;
	w.frag[lane].b[1] = b1;
	emu_warp_sync();
	for (unsigned l = 0; l < 32; l++) {
		unsigned gid = l >> 2, tig = l % 4;

		for (int i = 0; i < 8; i++) {
			unsigned row = gid + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
			unsigned col = 2 * tig + (i & 1) + (i >= 4 ? 8 : 0);

			A[row][col] = half_value(bf16, w.frag[l].a[i / 2], i & 1);
		}
		for (int i = 0; i < 4; i++)
			B[2 * tig + (i & 1) + (i >= 2 ? 8 : 0)][gid] =
				half_value(bf16, w.frag[l].b[i / 2], i & 1);
	}
	for (int i = 0; i < 4; i++) {
		unsigned row = (lane >> 2) + (i >= 2 ? 8 : 0), col = 2 * (lane % 4) + (i & 1);
		double sum = d[i];

		for (int k = 0; k < 16; k++)
			sum += A[row][k] * B[k][col];
		d[i] = (float)sum;
	}
	emu_warp_sync();
}

void emu_launch(emu_kernel_fn *fn, unsigned grid, unsigned block, size_t smem,
		const struct kvg_attend_args *args)
{
	if (block == 0 || block % 32 || block > MAX_THREADS)
		die("a block must be 32 to 1024 threads, whole warps");
	st.fn = fn;
	st.args = args;
	st.nthreads = block;
	st.smem = smem ? malloc(smem) : nullptr;
	if (smem && !st.smem)
		die("no memory for the block's shared memory");
	for (unsigned b = 0; b < grid; b++) {
		st.block = emu_dim3{ b, 0, 0 };
		if (st.smem) /* as undefined as a GPU's: NaN floats, huge offsets */
			memset(st.smem, 0xff, smem);
		run_block();
	}
	free(st.smem);
	st.smem = nullptr;
}
