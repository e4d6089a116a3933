# libFuzzer fuzzers (included by the top Makefile). Built with clang apart from
# the normal build, into build/fuzz/: every object with ASan, UBSan (any report
# aborts) and libFuzzer's coverage, the core with KVCORE_DEBUG (its invariants
# checked after every operation).
#
#   make fuzz-build         the three fuzzers (skipped, with the reason, when
#                           clang's libFuzzer runtime is missing)
#   make fuzz-smoke         each for 30 s (what CI runs)
#   make fuzz               each for FUZZ_SECONDS (default 600)
#   make fuzz-seeds         regenerate tests/fuzz/corpus/session/ (gen_session_seeds.c)
#   tests/fuzz/run.sh NAME SECONDS   one of them; see the script
#
# Corpora grow in build/fuzz/corpus/NAME, seeded from tests/fuzz/corpus/NAME;
# crashes are saved as build/fuzz/artifacts/NAME-crash-*.

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 600
FUZZ_BUILD := build/fuzz
FUZZ_OBJDIR := $(FUZZ_BUILD)/obj
# No alignment checks: the daemon reads client-chosen arena offsets through
# typed pointers (an ATTEND header at any offset, DUMP_FREEQ's output), which
# UBSan reports at once, and the protocol does not ask for aligned offsets.
# A known finding (tests/fuzz/README.md); `make fuzz-build FUZZ_SAN=...` without
# -fno-sanitize=alignment (and another FUZZ_BUILD) brings them back.
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize=alignment -fno-sanitize-recover=all \
	    -fno-omit-frame-pointer
# The SIMD attention kernels without UBSan: with it and the coverage
# instrumentation clang 14 takes over 15 minutes on attend_avx512.c (ASan alone,
# 12 s). They compute on ranges checked before a job starts; ASan still watches
# their heap accesses (the split-K partials).
FUZZ_SIMD_SRC := $(filter daemon/attn/attend_avx%,$(ATTN_SRC))
FUZZ_SIMD_SAN := -fsanitize=address -fno-omit-frame-pointer
FUZZ_OBJ_SAN = $(FUZZ_SAN)
FUZZ_CFLAGS = $(CFLAGS_BASE) -Idaemon -O1 $(FUZZ_OBJ_SAN) -fsanitize=fuzzer-no-link \
	      -DKVCORE_DEBUG -MMD -MP
FUZZ_LDFLAGS := -O1 $(FUZZ_SAN) -fsanitize=fuzzer
FUZZERS := fuzz_session fuzz_config fuzz_kvtrace
FUZZ_BINS := $(addprefix $(FUZZ_BUILD)/,$(FUZZERS))

# The daemon as kvpoold links it, less main.c (the fuzzers have their own entry
# and the event loop they need); the pool parameter parser it shares with lib/.
FUZZ_DAEMON_SRC := $(filter-out daemon/main.c,$(DAEMON_SRC)) $(ATTN_SRC) lib/pool_params.c \
		   $(CORE_SRC) tests/fuzz/fuzz_daemon.c
FUZZ_SESSION_SRC := tests/fuzz/fuzz_session.c tests/fuzz/fuzz_client.c tests/fuzz/fuzz_requests.c
FUZZ_DAEMON_LIBS := -luring -linih -lxxhash -lmsgpackc -lzmq -lhiredis -lssl -lcrypto -lacl -lm -lpthread
# kvtrace's sources but its main() and its daemon target (the fuzzer replays in process).
FUZZ_TRACE_SRC := $(filter-out tools/kvtrace/main.c tools/kvtrace/daemon.c,$(TRACE_SRC)) $(CORE_SRC)

fuzz_obj = $(patsubst %.c,$(FUZZ_OBJDIR)/%.o,$(1))
FUZZ_ALL_SRC := $(sort $(FUZZ_DAEMON_SRC) $(FUZZ_SESSION_SRC) $(FUZZ_TRACE_SRC) \
		  tests/fuzz/fuzz_config.c tests/fuzz/fuzz_kvtrace.c)
FUZZ_ALL_OBJ := $(call fuzz_obj,$(FUZZ_ALL_SRC))

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-seeds

# As the top Makefile's stamp: objects follow the compiler and flags they were built with.
FUZZ_STAMP := $(FUZZ_BUILD)/.cflags
$(FUZZ_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SIMD_SAN)' | cmp -s - $@ || \
		echo '$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SIMD_SAN)' > $@

$(call fuzz_obj,$(FUZZ_SIMD_SRC)): FUZZ_OBJ_SAN = $(FUZZ_SIMD_SAN)
$(FUZZ_ALL_OBJ): $(FUZZ_OBJDIR)/%.o: %.c $(FUZZ_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/fuzz_session: $(call fuzz_obj,$(FUZZ_SESSION_SRC) $(FUZZ_DAEMON_SRC))
	$(FUZZ_CC) $(FUZZ_LDFLAGS) $^ $(FUZZ_DAEMON_LIBS) -o $@

$(FUZZ_BUILD)/fuzz_config: $(call fuzz_obj,tests/fuzz/fuzz_config.c $(FUZZ_DAEMON_SRC))
	$(FUZZ_CC) $(FUZZ_LDFLAGS) $^ $(FUZZ_DAEMON_LIBS) -o $@

$(FUZZ_BUILD)/fuzz_kvtrace: $(call fuzz_obj,tests/fuzz/fuzz_kvtrace.c $(FUZZ_TRACE_SRC))
	$(FUZZ_CC) $(FUZZ_LDFLAGS) $^ -lxxhash -o $@

fuzz-build:
	@tests/fuzz/run.sh --check || { echo "fuzz-build: skipped"; exit 0; }; \
	$(MAKE) --no-print-directory $(FUZZ_BINS)

# Every fuzzer runs even when one fails; 77 (no libFuzzer runtime) is a skip.
fuzz_run = status=0; for f in $(FUZZERS); do tests/fuzz/run.sh $$f $(1); rc=$$?; \
	   [ $$rc = 0 ] || [ $$rc = 77 ] || status=1; done; exit $$status

fuzz: fuzz-build
	@$(call fuzz_run,$(FUZZ_SECONDS))

fuzz-smoke: fuzz-build
	@$(call fuzz_run,30)

$(FUZZ_BUILD)/gen_session_seeds: tests/fuzz/gen_session_seeds.c tests/fuzz/session_format.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $< -o $@

fuzz-seeds: $(FUZZ_BUILD)/gen_session_seeds
	$< tests/fuzz/corpus/session

-include $(shell find $(FUZZ_OBJDIR) -name '*.d' 2>/dev/null)
