// Transpose of a row-major rows×cols matrix of 32-bit words: dst[c·rows + r] = src[r·cols + c].
//
// The MMM kernel's tiles with `a_kmajor` (safemon/kernels/catalog.py) read Aᵀ; this makes it
// on the same stream, just before the kernel. Words are moved as unsigned integers, so every
// bit pattern (NaN payloads, signed zeros, subnormals) arrives unchanged and the kernel's
// finite check (mmm.cu) sees exactly the words of A.
//
// One 32×32 tile of src per block iteration, staged in shared memory with one padding word
// per row (column reads then fall on 32 different banks); blockDim is (32, 8), each thread
// moves 4 words of the tile in and 4 out, so both the reads and the writes are coalesced
// 128-byte rows. The grid walks the tiles with a stride in both dimensions, so any grid
// covers any shape.

#define TILE 32
#define ROWS_PER_PASS 8

extern "C" __global__ void safemon_transpose(const unsigned* __restrict__ src,
                                             unsigned* __restrict__ dst, int rows, int cols) {
    __shared__ unsigned tile[TILE][TILE + 1];
    const int tiles_x = (cols + TILE - 1) / TILE;  // along the columns of src
    const int tiles_y = (rows + TILE - 1) / TILE;
    for (int ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
        for (int tx = blockIdx.x; tx < tiles_x; tx += gridDim.x) {
            const int c = tx * TILE + threadIdx.x;
#pragma unroll
            for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
                const int r = ty * TILE + j;
                if (r < rows && c < cols) tile[j][threadIdx.x] = src[(long long)r * cols + c];
            }
            __syncthreads();
            const int r = ty * TILE + threadIdx.x;
#pragma unroll
            for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
                const int c_out = tx * TILE + j;
                if (c_out < cols && r < rows) dst[(long long)c_out * rows + r] = tile[threadIdx.x][j];
            }
            __syncthreads();  // the tile is read before the next iteration overwrites it
        }
    }
}
