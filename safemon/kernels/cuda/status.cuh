// The status block of a checked launch (safemon/kernels/checked.py): STATUS_WORDS uint32
// words in device memory. Shared by the kernels that copy it to the host (status.cu,
// splitk.cu).
#pragma once
#define STATUS_WORDS 8
