/* allreduce: the MPI collective a data-parallel training job runs each step, between the pods of
 * tests/vm/two-nodes.sh. Each rank fills a buffer of COUNT floats with its rank + 1, sums them
 * with MPI_Allreduce, and checks every element against n(n+1)/2. It prints one line per size:
 *
 *   allreduce BYTES ITERS TIME_US ALGBW_MBS BUSBW_MBS
 *
 * TIME_US is the mean time of one allreduce; algbw is bytes / time; busbw is algbw * 2(n-1)/n,
 * as nccl-tests reports it. A wrong sum prints "allreduce: wrong sum" and exits 1, after every
 * rank agreed on it (so mpirun's status says it).
 *
 *   mpirun ... allreduce [MAX_BYTES]    sizes 4 B (one float) to MAX_BYTES (default 1 MiB), times 4
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long max = argc > 1 ? atol(argv[1]) : 1L << 20;
  if (max < 4) max = 4;
  float *buf = malloc(max), *out = malloc(max);
  if (!buf || !out) MPI_Abort(MPI_COMM_WORLD, 2);
  const float want = (float)n * (n + 1) / 2;
  int bad = 0;
  for (long bytes = 4; bytes <= max && !bad; bytes *= 4) {
    int count = (int)(bytes / sizeof(float));
    /* fewer iterations for big buffers: a soft-RoCE pair under emulation moves a few MB/s */
    int iters = bytes <= 4096 ? 50 : bytes <= 65536 ? 10 : 3;
    for (int i = 0; i < count; i++) buf[i] = (float)(rank + 1);
    MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++)
      MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters;
    int mine = 0;
    for (int i = 0; i < count; i++)
      if (out[i] != want) mine = 1;
    MPI_Allreduce(&mine, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !bad) {
      double alg = bytes / t / 1e6;
      printf("allreduce %ld %d %.1f %.2f %.2f\n", bytes, iters, t * 1e6, alg, alg * 2 * (n - 1) / n);
      fflush(stdout);
    }
  }
  if (bad && rank == 0) fprintf(stderr, "allreduce: wrong sum\n");
  MPI_Finalize();
  return bad;
}
