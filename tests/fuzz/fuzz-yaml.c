/* fuzz-yaml.c - the experiment YAML parser (prm_yaml_parse) and its
 * emitter: any text parses or fails with an error, and what parses emits
 * and parses again. */
#include "fuzz.h"

#include "primus/prm_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_dir(); /* quiet logs */
  prm_node_t *n = NULL;
  prm_err_t err = {0};
  if (prm_yaml_parse((const char *)data, size, "fuzz.yaml", &n, &err) == 0) {
    prm_sb_t out = {0};
    prm_yaml_emit(n, &out, 1);
    prm_node_t *again = NULL;
    prm_err_t err2 = {0};
    if (out.buf && prm_yaml_parse(out.buf, out.len, "emitted.yaml", &again, &err2) == 0)
      prm_node_free(again);
    prm_sb_free(&out);
    prm_node_free(n);
  }
  return 0;
}
