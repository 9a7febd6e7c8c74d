// Publish a checked launch's status block to the host: row[w] = status[w], w < STATUS_WORDS.
//
// `row` is page-locked host memory, which the device writes directly under unified
// addressing (the host pointer is the device pointer). A synchronous call queues this kernel
// after its last checked kernel and reads `row` once the stream synchronisation returns.
// Until 2026-11-24 it queued a 32-byte device-to-host copy instead, a copy-engine operation
// that cost more wall time than this kernel (evidence/h100-2026-11-24-launch/). One block of
// one warp; the words are copied as they are, with no arithmetic, so nothing here needs a
// reference mirror.
#include "status.cuh"

extern "C" __global__ void safemon_status_publish(const unsigned* __restrict__ status,
                                                  unsigned* __restrict__ row) {
    if (threadIdx.x < STATUS_WORDS) row[threadIdx.x] = status[threadIdx.x];
}
