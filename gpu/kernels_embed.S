/* SPDX-License-Identifier: MIT */
/* A fatbin (KERNELS_FATBIN, built from a gpu/X.cu) inside the plugin, as KERNELS_SYMBOL. */
	.section .rodata
	.balign 16
	.globl KERNELS_SYMBOL
	.hidden KERNELS_SYMBOL
KERNELS_SYMBOL:
	.incbin KERNELS_FATBIN
	.byte 0
	.section .note.GNU-stack,"",@progbits
