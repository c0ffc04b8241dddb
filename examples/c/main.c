/* Calls the mlp sample (models/mlp.onnx compiled with `onnxcc compile models/mlp.onnx -o out/mlp`)
 * from C: checks the header matches the library, prints the signature, runs one batch and shows
 * how a bad call is reported. Usage: mlp_demo [BATCH] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

int main(int argc, char **argv) {
  int64_t batch = argc > 1 ? atoll(argv[1]) : 2;
  if (strcmp(MLP_BUILD_ID, mlp_build_id()) != 0) {
    fprintf(stderr, "mlp.h is from build %s, libmlp.so from %s: rebuild\n", MLP_BUILD_ID, mlp_build_id());
    return 1;
  }
  for (int k = 0; k < mlp_num_inputs(); k++) {
    const mlp_tensor_info *t = mlp_input_info(k);
    printf("input %s: rank %d, dims", t->name, t->ndim);
    for (int j = 0; j < t->ndim; j++) printf(" %s", t->dims[j]);
    printf("\n");
  }

  float *x = calloc((size_t)batch * 64, sizeof *x);
  for (int64_t i = 0; i < batch * 64; i++) x[i] = (float)(i % 7) * 0.1f;
  int64_t x_shape[2] = {batch, 64}, y_shape[2];
  DLTensor in = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, x_shape, NULL, 0};
  if (mlp_output_shape(&in, 1, 0, y_shape) != MLP_OK) {
    fprintf(stderr, "%s\n", mlp_last_error());
    return 1;
  }
  float *y = malloc((size_t)(y_shape[0] * y_shape[1]) * sizeof *y);
  DLTensor out = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, y_shape, NULL, 0};
  int rc = mlp_run(&in, 1, &out, 1);
  if (rc != MLP_OK) {
    fprintf(stderr, "mlp_run: %d %s\n", rc, mlp_last_error());
    return 1;
  }
  float row = 0;
  for (int j = 0; j < 10; j++) row += y[j];
  printf("y: [%lld, %lld], row 0 sums to %.4f (softmax), %s\n", (long long)y_shape[0], (long long)y_shape[1],
         row, mlp_version_info(mlp_last_version()));

  int64_t bad_shape[2] = {batch, 63};
  in.shape = bad_shape;
  rc = mlp_run(&in, 1, &out, 1);
  printf("a wrong dim: code %d (MLP_ERR_SHAPE is %d): %s\n", rc, MLP_ERR_SHAPE, mlp_last_error());
  free(x);
  free(y);
  return 0;
}
