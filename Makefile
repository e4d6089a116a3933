# kvpool. `make` builds everything; `make test` builds the normal and the
# sanitizer variants and runs the suite; `make demo` runs the main job.
#
# Variants: VARIANT=asan (ASan+UBSan, invariant checks inside the core, test hooks),
# VARIANT=tsan (ThreadSanitizer, for the threaded data path: workers, split-K)
# and VARIANT=clang build into build/<variant>/. Every build puts its programs (kvpoold, kvctl,
# kvbench, kvtrace, kvengine) in $(BUILD)/bin: build/bin/, build/<variant>/bin/; `make kvctl`
# (kvpoold, kvbench, kvtrace, kvengine) builds one.

VARIANT ?=
CC ?= cc
ifeq ($(origin CC),default)
CC := cc
endif
# C++ only for the CPU emulation of the CUDA kernels (gpu/emu/), which their test runs.
ifeq ($(origin CXX),default)
CXX := g++
endif

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# The release, from VERSION: in the flags, so a new one rebuilds every object. The code is
# what the setup reply carries, KVP_VERSION_CODE(major, minor, patch).
VERSION := $(shell cat VERSION)
VERSION_CODE := $(shell echo '$(VERSION)' | awk -F. '{ print $$1 * 65536 + $$2 * 256 + $$3 }')
CFLAGS_BASE := -std=gnu11 $(WARN) -g -D_GNU_SOURCE -Idaemon -Idaemon/core -Itools \
	       -DKVPOOL_VERSION=\"$(VERSION)\" -DKVPOOL_VERSION_CODE=$(VERSION_CODE)
OPT := -O2

ifeq ($(VARIANT),)
BUILD := build
else ifeq ($(VARIANT),asan)
BUILD := build/asan
OPT := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -DKVCORE_DEBUG \
       -DKVPD_TEST_HOOKS
else ifeq ($(VARIANT),clang)
CC := clang
CXX := clang++
BUILD := build/clang
else ifeq ($(VARIANT),tsan)
CC := clang
CXX := clang++
BUILD := build/tsan
OPT := -O1 -fsanitize=thread -fno-omit-frame-pointer
else
$(error unknown VARIANT '$(VARIANT)': use asan, tsan or clang)
endif
BIN := $(BUILD)/bin

CFLAGS ?=
LDFLAGS ?=
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
ALL_CFLAGS := $(CFLAGS_BASE) $(OPT) $(CFLAGS) -MMD -MP
ALL_LDFLAGS := $(OPT) $(LDFLAGS)

CORE_SRC := $(wildcard daemon/core/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
CORE_LIB := $(BUILD)/libkvcore.a

LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB_A := $(BUILD)/libkvpool.a
# The shared library (default build only: a sanitizer's runtime belongs to the program):
# the same position-independent objects, exporting the kvp_* symbols only.
LIB_SO := $(if $(VARIANT),,$(BUILD)/libkvpool.so.0)

# The Python binding (lib/python/kvpool): a CPython extension over libkvpool, built against
# the stable ABI of 3.11 (one build for every CPython from 3.11 on) where Python.h is, into
# the package itself so that PYTHONPATH=lib/python imports it. Debian's python3 first.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
PY_INCLUDE := $(if $(PYTHON),$(shell $(PYTHON) -c \
	'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null))
PY_VERSION := $(if $(PYTHON),$(shell $(PYTHON) -c \
	'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null))
PYTHON_SITEDIR ?= $(PREFIX)/lib/python$(PY_VERSION)/dist-packages
PY_SRC := $(wildcard lib/python/kvpool/*.c)
PY_OBJ := $(PY_SRC:%.c=$(BUILD)/%.o)
PY_EXT := $(if $(VARIANT),,$(if $(wildcard $(PY_INCLUDE)/Python.h),lib/python/kvpool/_kvpool.abi3.so))

ATTN_SRC ?= $(filter-out daemon/attn/bench_kernel.c,$(wildcard daemon/attn/*.c))
ATTN_OBJ := $(ATTN_SRC:%.c=$(BUILD)/%.o)
# The daemon's rooms, top first (daemon/ROOMS ranks them; tests/rooms.sh checks the includes).
DAEMON_ROOMS := requests handover data tier events session pools tenants observe loop config
DAEMON_SRC := $(wildcard daemon/*.c $(DAEMON_ROOMS:%=daemon/%/*.c))
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/%.o) $(ATTN_OBJ)

TRACE_SRC := $(wildcard tools/kvtrace/*.c)
# Each program's sources are its folder's; tools/common/ holds what two share (tools/ROOMS says
# what each may include, tests/rooms.sh checks it).
BENCH_SRC := $(wildcard tools/kvbench/*.c) tools/common/dtype_store.c
ENGINE_SRC := $(wildcard tools/kvengine/*.c) tools/common/dtype_store.c
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
INTEG_LIB_SRC := tests/integration/harness.c tests/integration/kvref.c tests/integration/cudatest.c \
		 tests/integration/map_shared.c
INTEG_SRC := $(filter-out $(INTEG_LIB_SRC),$(wildcard tests/integration/*.c))
INTEG_BIN := $(INTEG_SRC:tests/integration/%.c=$(BUILD)/tests/integration/%)

# The CUDA backend plugin, built where nvcc is (make NVCC= skips it). Its host code is C that
# nvcc hands to $(CC); the GPU code to come is built for Hopper, with PTX for later GPUs. A
# daemon looks for it in gpu/ beside its own directory: $(BUILD)/gpu/ for $(BIN)/kvpoold.
ifeq ($(origin NVCC),undefined)
NVCC := $(shell command -v nvcc 2>/dev/null || \
	  { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
NVCC_GENCODE := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# No sanitizers: the plugin is plain driver calls, and their runtimes would have to be linked in.
NVCC_FLAGS := -ccbin $(CC) $(NVCC_GENCODE) -D_GNU_SOURCE -Idaemon -Idaemon/core \
	      $(addprefix -Xcompiler ,-std=gnu11 $(WARN) -O2 -g -fPIC -fvisibility=hidden)
GPU_SRC := $(filter-out gpu/cuda_probe.c,$(wildcard gpu/*.c))
# Kernels: each gpu/X.cu a fatbin, embedded as kvpool_fatbin_X (gpu/kernels_embed.S) and loaded
# by the plugin with cuModuleLoadData.
GPU_CU := $(wildcard gpu/*.cu)
GPU_C_OBJ := $(GPU_SRC:%.c=$(BUILD)/%.o)
GPU_OBJ := $(GPU_C_OBJ) $(GPU_CU:%.cu=$(BUILD)/%.fatbin.o)
# A fatbin depends on nvcc's flags alone, not a variant's: one for all, in build/gpu/ (the
# attention kernels take minutes to build).
FATBIN_DIR := build/gpu
CUDA_PLUGIN := $(BUILD)/gpu/libkvpool_cuda.so
# What a machine (a sandbox) lets the GPU pool do, beside the plugin: the GPU tests run it.
CUDA_PROBE := $(dir $(CUDA_PLUGIN))cuda_probe

# What the kernels include (nvcc builds fatbins without dependency files).
GPU_DEV_HDR := $(wildcard gpu/*.cuh gpu/*.h) daemon/attn/kvmask.h daemon/attn/attend.h daemon/core/kvcore.h

# The kernels of gpu/kv_attend.cu on the CPU (gpu/emu/), for tests/unit/test_gpu_attend.c: built
# with every variant's compiler and sanitizers, nvcc or not. -fno-sanitize=vptr: no RTTI here.
GPU_EMU_OBJ := $(BUILD)/gpu/emu/emu.o $(BUILD)/gpu/emu/attend_emu.o
CXXFLAGS_EMU := -std=gnu++17 -Wall -Wextra -Werror -g -D_GNU_SOURCE -Idaemon -Idaemon/core -fno-exceptions \
		-fno-rtti $(OPT) $(if $(findstring sanitize=undefined,$(OPT)),-fno-sanitize=vptr) -MMD -MP

# Runs a program where io_uring is refused (a seccomp filter): the epoll fallback's test.
NO_IO_URING := $(BUILD)/tests/no_io_uring

PROGRAMS := kvpoold kvtrace kvbench kvctl kvengine
TOOLS := $(BIN)/kvtrace $(BIN)/kvbench $(BIN)/kvctl $(BIN)/kvengine
DAEMON := $(BIN)/kvpoold

.PHONY: all deps test-deps test demo demo-vllm bench install uninstall clean $(PROGRAMS)
all: $(CORE_LIB) $(LIB_A) $(LIB_SO) $(DAEMON) $(TOOLS) $(UNIT_BIN) $(INTEG_BIN) $(NO_IO_URING) \
	cuda-backend python-binding

# One program: `make kvctl` is $(BIN)/kvctl.
$(PROGRAMS): %: $(BIN)/%

# Every object depends on the compiler and flags it was built with (as git's GIT-CFLAGS):
# after a `make CFLAGS=-DX`, a plain `make` rebuilds, never links objects of both.
# The flags as parsed: a recipe's $(ALL_CFLAGS) would carry the target-specific additions of
# whichever object (the binding's, the library's) asked for the stamp first, and the next make
# would rebuild everything.
FLAGS_STAMP := $(BUILD)/.cflags
STAMPED_FLAGS := $(CC) $(ALL_CFLAGS)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(STAMPED_FLAGS)' | cmp -s - $@ || echo '$(STAMPED_FLAGS)' > $@

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Where an installed kvpoold finds the CUDA plugin; like the flags, a change rebuilds plugin.o.
PLUGIN_DIR_STAMP := $(BUILD)/.plugin_dir
$(PLUGIN_DIR_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(LIBDIR)/kvpool' | cmp -s - $@ || echo '$(LIBDIR)/kvpool' > $@

$(BUILD)/daemon/pools/plugin.o: daemon/pools/plugin.c $(FLAGS_STAMP) $(PLUGIN_DIR_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DKVPOOL_PLUGIN_DIR='"$(LIBDIR)/kvpool"' -c $< -o $@

.PHONY: cuda-backend
ifneq ($(NVCC),)
GPU_STAMP := $(BUILD)/.gpuflags
$(GPU_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(NVCC) $(NVCC_FLAGS)' | cmp -s - $@ || echo '$(NVCC) $(NVCC_FLAGS)' > $@

$(GPU_C_OBJ): $(BUILD)/gpu/%.o: gpu/%.c $(GPU_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -x c -MMD -MP -c $< -o $@

FATBIN_STAMP := build/.nvccflags
$(FATBIN_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(NVCC) $(NVCC_GENCODE)' | cmp -s - $@ || echo '$(NVCC) $(NVCC_GENCODE)' > $@

$(FATBIN_DIR)/%.fatbin: gpu/%.cu $(GPU_DEV_HDR) $(FATBIN_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_GENCODE) -O3 -Werror all-warnings -Idaemon -Idaemon/core -fatbin $< -o $@

$(BUILD)/gpu/%.fatbin.o: $(FATBIN_DIR)/%.fatbin gpu/kernels_embed.S
	$(CC) -c -DKERNELS_FATBIN='"$<"' -DKERNELS_SYMBOL=kvpool_fatbin_$(subst -,_,$*) \
		gpu/kernels_embed.S -o $@

# -cudart none: the plugin loads the driver itself and needs no runtime; -z defs: a symbol
# missing shows here, not at the daemon's dlopen.
$(CUDA_PLUGIN): $(GPU_OBJ)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -shared -cudart none -Xlinker -z,defs $^ -o $@

$(BUILD)/gpu/cuda_probe.o: gpu/cuda_probe.c $(GPU_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -x c -MMD -MP -c $< -o $@

$(CUDA_PROBE): $(BUILD)/gpu/cuda_probe.o
	$(CC) $(ALL_LDFLAGS) $< -o $@

cuda-backend: $(CUDA_PLUGIN) $(CUDA_PROBE)
	@echo "CUDA backend: built"
else
cuda-backend:
	@echo "CUDA backend: not built: nvcc not found"
endif

include tools/bpf/bpf.mk

$(CORE_LIB): $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

# Position-independent (for the .so, and the binding that links the archive); the stamp
# rebuilds objects a build from before this flag left.
LIB_STAMP := $(BUILD)/.libflags
$(LIB_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '-fPIC' | cmp -s - $@ || echo '-fPIC' > $@
$(LIB_OBJ): ALL_CFLAGS += -fPIC
$(LIB_OBJ): $(LIB_STAMP)

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# -z defs: every symbol the library needs is named on its link line.
$(BUILD)/libkvpool.so.0: $(LIB_OBJ) lib/libkvpool.map
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libkvpool.so.0 -Wl,--version-script=lib/libkvpool.map \
		-Wl,-z,defs $(LIB_OBJ) -ljson-c -o $@
	ln -sf libkvpool.so.0 $(BUILD)/libkvpool.so

.PHONY: python-binding
ifneq ($(PY_EXT),)
$(PY_OBJ): ALL_CFLAGS += -fPIC -fvisibility=hidden -DPy_LIMITED_API=0x030B0000 -isystem $(PY_INCLUDE) -Ilib

# libkvpool goes in whole (its archive, position-independent), hidden behind PyInit__kvpool.
$(PY_EXT): $(PY_OBJ) $(LIB_A) lib/python/kvpool/export.map
	$(CC) $(ALL_LDFLAGS) -shared -Wl,--version-script=lib/python/kvpool/export.map $(PY_OBJ) \
		$(LIB_A) -ljson-c -o $@

python-binding: $(PY_EXT)
	@echo "Python binding: built ($(PY_EXT))"
else
python-binding:
	@$(if $(VARIANT),:,echo "Python binding: not built: no Python.h for $(or $(PYTHON),python3) (apt-get install python3-dev)")
endif

# The daemon shares one pure function with the library: the pool parameter parser.
$(DAEMON): $(DAEMON_OBJ) $(BUILD)/lib/pool_params.o $(CORE_LIB)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -luring -linih -lxxhash -lmsgpackc -lzmq -lhiredis -lssl -lcrypto -lacl -lm -lpthread -o $@

$(BIN)/kvtrace: $(TRACE_SRC:%.c=$(BUILD)/%.o) $(CORE_LIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -lxxhash -o $@

$(BIN)/kvengine: $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -lm -o $@

KVCTL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/kvctl/*.c))

$(BIN)/kvctl: $(KVCTL_OBJ) $(BPF_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -ljson-c -lmicrohttpd -lbpf -lelf -lz -lpthread -o $@

$(BIN)/kvbench: $(BENCH_SRC:%.c=$(BUILD)/%.o) $(BPF_OBJS) $(CORE_LIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -ljson-c -lxxhash -lzmq -lhiredis -lpthread -lbpf -lelf -lz -lm -o $@

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(CORE_LIB) $(ATTN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -lcmocka -lxxhash -lmsgpackc -lm -lpthread -o $@

# The CUDA kernels' test: the plan (built here as C, for the variant) and the emulated kernels.
$(GPU_EMU_OBJ): $(BUILD)/gpu/emu/%.o: gpu/emu/%.cc $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_EMU) -c $< -o $@

$(BUILD)/tests/gpu/attend_plan.o: gpu/attend_plan.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/tests/test_gpu_attend: $(BUILD)/tests/unit/test_gpu_attend.o \
		$(BUILD)/tests/gpu/attend_plan.o $(GPU_EMU_OBJ) $(CORE_LIB) $(ATTN_OBJ)
	@mkdir -p $(@D)
	$(CXX) $(ALL_LDFLAGS) $^ -lcmocka -lm -lpthread -o $@

# The worker pool's test links the pool itself, with a fake backend; the sizes' test, them.
$(BUILD)/tests/test_workers: $(BUILD)/daemon/pools/workers.o
$(BUILD)/tests/test_sizes: $(BUILD)/daemon/session/sizes.o
$(BUILD)/tests/test_event_encode: $(BUILD)/daemon/events/encode.o
$(BUILD)/tests/test_state_file: $(BUILD)/daemon/handover/state_file.o

$(BUILD)/tests/integration/%: $(BUILD)/tests/integration/%.o \
		$(INTEG_LIB_SRC:%.c=$(BUILD)/%.o) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -lm -o $@

$(NO_IO_URING): $(BUILD)/tests/no_io_uring.o
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) $^ -o $@

# The debug + sanitizer core on its own, for building a single unit test by hand.
build/libkvcore-debug.a: FORCE
	$(MAKE) --no-print-directory VARIANT=asan build/asan/libkvcore.a
	cp build/asan/libkvcore.a $@

deps:
	@tools/deps.sh

test-deps:
	@tools/deps.sh --tests

test: test-deps
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory VARIANT=asan all
	$(MAKE) --no-print-directory VARIANT=tsan all
	$(MAKE) --no-print-directory fuzz-build
	tests/run.sh

demo: deps
	$(MAKE) --no-print-directory all
	tools/demo.sh

# Two vLLM servers (its CPU build, installed into .venv-cpu on first use) sharing one pool.
demo-vllm: deps
	$(MAKE) --no-print-directory all
	tools/demo-vllm.sh

# The standard figures (bench/README.md), about 2 minutes on 2 cores: bench/run.sh.
bench: deps
	$(MAKE) --no-print-directory all
	bench/run.sh

# Installed where systemd and man look for them under PREFIX (/usr/local by default); the
# config in SYSCONFDIR (/etc), written only where none exists: it is the operator's.
SBINDIR ?= $(PREFIX)/sbin
BINDIR ?= $(PREFIX)/bin
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share
SYSCONFDIR ?= /etc
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
MAN_PAGES := docs/man/kvpoold.8 docs/man/kvctl.8 docs/man/kvtrace.1 docs/man/kvbench.1 \
	     docs/man/kvpool.conf.5 docs/man/libkvpool.3
INSTALLED_BINS := kvctl kvtrace kvbench kvengine
D := $(DESTDIR)

install: all
	install -d $(D)$(BINDIR) $(D)$(SBINDIR) $(D)$(LIBDIR)/pkgconfig \
		$(D)$(INCLUDEDIR)/kvpool/lib $(D)$(INCLUDEDIR)/kvpool/uapi \
		$(D)$(SYSTEMD_UNITDIR) $(D)$(SYSUSERSDIR) $(D)$(DATADIR)/kvpool/bpftrace \
		$(D)$(DATADIR)/kvpool/grafana \
		$(D)$(DATADIR)/doc/kvpool $(D)$(SYSCONFDIR)/kvpool \
		$(addprefix $(D)$(MANDIR)/man,1 3 5 8)
	install -m 755 build/bin/kvpoold $(D)$(SBINDIR)/
	install -m 755 $(addprefix build/bin/,$(INSTALLED_BINS)) $(D)$(BINDIR)/
	install -m 644 build/libkvpool.a $(D)$(LIBDIR)/
	install -m 755 build/libkvpool.so.0 $(D)$(LIBDIR)/
	ln -sf libkvpool.so.0 $(D)$(LIBDIR)/libkvpool.so
	install -m 644 lib/libkvpool.h $(D)$(INCLUDEDIR)/kvpool/lib/
	install -m 644 uapi/kvpool.h $(D)$(INCLUDEDIR)/kvpool/uapi/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' lib/libkvpool.pc.in >$(D)$(LIBDIR)/pkgconfig/libkvpool.pc
	$(foreach m,$(MAN_PAGES),install -m 644 $(m) $(D)$(MANDIR)/man$(subst .,,$(suffix $(m)))/ &&) true
	sed -e 's|@SBINDIR@|$(SBINDIR)|' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|' \
		daemon/systemd/kvpoold.service.in >$(D)$(SYSTEMD_UNITDIR)/kvpoold.service
	install -m 644 daemon/systemd/kvpoold.socket $(D)$(SYSTEMD_UNITDIR)/
	sed -e 's|@BINDIR@|$(BINDIR)|' daemon/systemd/kvpool-exporter.service.in \
		>$(D)$(SYSTEMD_UNITDIR)/kvpool-exporter.service
	install -m 644 daemon/systemd/kvpool.sysusers $(D)$(SYSUSERSDIR)/kvpool.conf
	install -m 644 tools/bpftrace/*.bt $(D)$(DATADIR)/kvpool/bpftrace/
	install -m 644 daemon/systemd/kv-events-tcp.conf $(D)$(DATADIR)/kvpool/
	install -m 644 daemon/systemd/tier-remote.conf $(D)$(DATADIR)/kvpool/
	install -m 644 tools/grafana/kvpool.json $(D)$(DATADIR)/kvpool/grafana/
	sed -e 's|@DATADIR@|$(DATADIR)|' tools/grafana/provisioning.yaml.in \
		>$(D)$(DATADIR)/kvpool/grafana/provisioning.yaml
	install -m 644 LICENSE README.md $(D)$(DATADIR)/doc/kvpool/
	@if [ -e $(D)$(SYSCONFDIR)/kvpool/kvpool.conf ]; then \
		echo "kept $(D)$(SYSCONFDIR)/kvpool/kvpool.conf (yours); the default is daemon/kvpool.conf"; \
	else \
		echo "install -m 644 daemon/kvpool.conf $(D)$(SYSCONFDIR)/kvpool/kvpool.conf"; \
		install -m 644 daemon/kvpool.conf $(D)$(SYSCONFDIR)/kvpool/kvpool.conf; \
	fi
ifneq ($(PY_EXT),)
	install -d $(D)$(PYTHON_SITEDIR)/kvpool
	install -m 644 lib/python/kvpool/*.py $(D)$(PYTHON_SITEDIR)/kvpool/
	install -d $(D)$(PYTHON_SITEDIR)/kvpool/vllm
	install -m 644 lib/python/kvpool/vllm/*.py $(D)$(PYTHON_SITEDIR)/kvpool/vllm/
	install -m 755 $(PY_EXT) $(D)$(PYTHON_SITEDIR)/kvpool/
endif
ifneq ($(NVCC),)
	install -d $(D)$(LIBDIR)/kvpool
	install -m 755 $(CUDA_PLUGIN) $(D)$(LIBDIR)/kvpool/
endif

# Everything install wrote but the config, which may hold the operator's edits.
uninstall:
	rm -f $(D)$(SBINDIR)/kvpoold $(addprefix $(D)$(BINDIR)/,$(INSTALLED_BINS)) \
		$(addprefix $(D)$(LIBDIR)/,libkvpool.a libkvpool.so.0 libkvpool.so pkgconfig/libkvpool.pc) \
		$(D)$(LIBDIR)/kvpool/libkvpool_cuda.so \
		$(addprefix $(D)$(SYSTEMD_UNITDIR)/,kvpoold.service kvpoold.socket \
			kvpool-exporter.service) \
		$(D)$(SYSUSERSDIR)/kvpool.conf \
		$(foreach m,$(MAN_PAGES),$(D)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m)))
	rm -rf $(D)$(INCLUDEDIR)/kvpool $(D)$(DATADIR)/kvpool $(D)$(DATADIR)/doc/kvpool \
		$(D)$(PYTHON_SITEDIR)/kvpool
	-rmdir $(D)$(LIBDIR)/kvpool 2>/dev/null
	@! [ -e $(D)$(SYSCONFDIR)/kvpool/kvpool.conf ] || \
		echo "kept $(D)$(SYSCONFDIR)/kvpool/kvpool.conf (remove it by hand)"

clean:
	rm -rf build lib/python/kvpool/_kvpool.abi3.so

.PHONY: FORCE
# Objects of test and tool binaries are not throwaway intermediates: keep them for incremental builds.
.SECONDARY:
FORCE:

# libFuzzer targets: make fuzz (long runs), make fuzz-smoke (what CI runs).
-include tests/fuzz/fuzz.mk

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
