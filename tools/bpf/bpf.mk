# kvacct: the BPF accounting behind `kvctl acct` (tools/kvctl/acct.c) and
# `kvbench overhead` (tools/bpf/). Included from the top Makefile, after BUILD,
# CC and ALL_CFLAGS are set. Defines BPF_OBJS, the user-space objects to link
# into kvctl and kvbench (with -lbpf -lelf -lz), and the chain behind them:
#   vmlinux.h   bpftool btf dump of the running kernel's BTF
#   kvacct.bpf.o  clang -target bpf -g -O2 (CO-RE), DWARF stripped, BTF kept
#   kvacct.skel.h bpftool gen skeleton, embedding the object
# Needs clang, llvm-strip, bpftool, libbpf-dev (Debian 12 packages).

BPF_CLANG ?= clang
BPF_STRIP ?= llvm-strip
BPFTOOL ?= bpftool
BPF_VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
BPF_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/' \
	-e 's/ppc64le/powerpc/' -e 's/riscv64/riscv/' -e 's/s390x/s390/' -e 's/loongarch64/loongarch/')
# The BPF target has no system include directories of its own: use the host's
# (for <asm/...> behind <linux/errno.h>, which <bpf/usdt.bpf.h> includes), after ours.
BPF_SYS_INCLUDES := $(shell $(BPF_CLANG) -v -E - </dev/null 2>&1 | \
	sed -n '/<...> search starts here:/,/End of search list./{ s| \(/.*\)|-idirafter \1|p }')

BPF_OUT := $(BUILD)/tools/bpf
BPF_OBJS := $(BPF_OUT)/kvacct.o

$(BPF_OUT)/vmlinux.h:
	@mkdir -p $(@D)
	@test -r $(BPF_VMLINUX_BTF) || { echo "bpf.mk: no kernel BTF at $(BPF_VMLINUX_BTF)" \
		"(CONFIG_DEBUG_INFO_BTF); set BPF_VMLINUX_BTF" >&2; exit 1; }
	$(BPFTOOL) btf dump file $(BPF_VMLINUX_BTF) format c >$@.tmp
	mv $@.tmp $@

$(BPF_OUT)/kvacct.bpf.o: tools/bpf/kvacct.bpf.c tools/bpf/kvacct.h $(BPF_OUT)/vmlinux.h
	@mkdir -p $(@D)
	$(BPF_CLANG) -target bpf -g -O2 -Wall -Werror -D__TARGET_ARCH_$(BPF_ARCH) \
		-I$(BPF_OUT) -Itools/bpf $(BPF_SYS_INCLUDES) -c $< -o $@.tmp
	$(BPF_STRIP) -g $@.tmp
	mv $@.tmp $@

$(BPF_OUT)/kvacct.skel.h: $(BPF_OUT)/kvacct.bpf.o
	$(BPFTOOL) gen skeleton $< name kvacct_bpf >$@.tmp
	mv $@.tmp $@

# User space, with the top Makefile's flags (warnings as errors) and the skeleton's directory.
$(BPF_OUT)/%.o: tools/bpf/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -I$(BPF_OUT) -c $< -o $@

$(BPF_OUT)/kvacct.o: $(BPF_OUT)/kvacct.skel.h
