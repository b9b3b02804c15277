/* eval.c - `primus eval`: the mean loss and perplexity of a model on the
 * validation split (or valid_data_path's data), in the same batches
 * training evaluates. */
#include "train-impl.h"

int prm_eval_run(const prm_train_opts_t *o, const char *load, int64_t iters,
                 prm_eval_result_t *res, prm_err_t *err) {
  if (!load) load = o->load;
  if (!load)
    return prm_errf(err, PRM_EINVAL, "eval needs weights: pass --load DIR or set load: in the "
                                     "experiment");
  if (iters < 1) return prm_errf(err, PRM_EINVAL, "eval_iters must be at least 1, got %lld", (long long)iters);
  prm__session_t s;
  int rc = prm__session_open(o, 0, load, PRM_SPLIT_VALID, NULL, &s, err);
  if (rc) return rc;
  rc = prm__evaluate(&s, o, NULL, PRM_SPLIT_VALID, iters, res, err);
  if (rc == PRM_ENOENT)
    rc = prm_errf(err, PRM_EINVAL,
                  "%s: the validation split is empty (split \"%s\"); give it a share of the "
                  "documents",
                  o->split_path[PRM_SPLIT_VALID] ? o->split_path[PRM_SPLIT_VALID] : o->data_path,
                  o->split_path[PRM_SPLIT_VALID] ? "0,1,0" : o->split ? o->split : "");
  prm__session_close(&s);
  return rc;
}
