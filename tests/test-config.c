/* test-config.c - the experiment configuration: YAML parsing with line
 * numbers, extends chains, ${VAR} expansion, presets and precedence, schema
 * errors with file:line, the shipped presets, parameter counts and the
 * dump -> load round trip; Primus' own experiments (framework: megatron,
 * Megatron-LM's keys, Primus' model presets and their published sizes,
 * architectures primus does not train) and tokenizers named by Hugging
 * Face id. */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "primus/prm_config.h"
#include "primus/prm_data.h"
#include "primus/prm_model.h"

/* ---- helpers ------------------------------------------------------------ */

static char *tmp_file(const char *name, const char *text) {
  return prm_test_write(prm_test_tmpdir(), name, text);
}

/* Loads an experiment that must resolve; fails the test with the message. */
static prm_exp_t *load_ok(const char *path, const prm_override_t *ov, int nov) {
  prm_exp_t *e = NULL;
  prm_err_t err = {0};
  int rc = prm_exp_load(path, ov, nov, NULL, &e, &err);
  if (rc) fail_msg("prm_exp_load(%s): %s", path, err.msg);
  return e;
}

/* Loads an experiment that must fail with code; returns the message. */
static void load_fails(const char *path, const prm_override_t *ov, int nov, int code,
                       const char *want_msg) {
  prm_exp_t *e = NULL;
  prm_err_t err = {0};
  int rc = prm_exp_load(path, ov, nov, NULL, &e, &err);
  assert_null(e);
  if (rc != code) fail_msg("expected %s, got %s: %s", prm_errname(code), prm_errname(rc), err.msg);
  if (!strstr(err.msg, want_msg)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, want_msg);
}

static double get_f64(const prm_exp_t *e, const char *key) {
  double d = -1;
  assert_int_equal(prm_exp_get_f64(e, key, &d), 0);
  return d;
}

static int64_t get_int(const prm_exp_t *e, const char *key) {
  int64_t v = -1;
  assert_int_equal(prm_exp_get_int(e, key, &v), 0);
  return v;
}

static void assert_origin(const prm_exp_t *e, const char *key, const char *want_suffix) {
  char *o = prm_exp_origin(e, key);
  assert_non_null(o);
  if (!prm_endswith(o, want_suffix)) fail_msg("origin of %s is %s, want *%s", key, o, want_suffix);
  free(o);
}

/* An experiment around a model preset, with extra overrides lines. */
static char *write_exp(const char *name, const char *model, const char *overrides) {
  char *text = prm_xasprintf("work_group: team\n"
                             "user_name: tester\n"
                             "modules:\n"
                             "  pre_trainer:\n"
                             "    framework: native\n"
                             "    config: pre_trainer.yaml\n"
                             "    model: %s\n"
                             "    overrides:\n"
                             "      log_interval: 1\n"
                             "%s",
                             model, overrides ? overrides : "");
  char *p = tmp_file(name, text);
  free(text);
  return p;
}

/* ---- YAML --------------------------------------------------------------- */

static void test_yaml_parse(void **state) {
  (void)state;
  const char *text = "# comment\n"
                     "a: 1\n"
                     "b:\n"
                     "  c: \"123\"\n"
                     "  d: [x, 'y z']\n"
                     "e:\n"
                     "  - one\n"
                     "  - two\n"
                     "f:\n"
                     "g: ~\n"
                     "h: null\n"
                     "i: 'null'\n";
  prm_node_t *n = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_yaml_parse(text, strlen(text), "t.yaml", &n, &err), 0);
  assert_int_equal(n->kind, PRM_NODE_MAP);
  assert_int_equal(n->n, 7);
  prm_node_t *a = prm_node_get(n, "a");
  assert_string_equal(a->str, "1");
  assert_int_equal(a->line, 2);
  assert_false(a->quoted);
  assert_string_equal(a->file, "t.yaml");
  prm_node_t *c = prm_node_path(n, "b.c");
  assert_string_equal(c->str, "123");
  assert_true(c->quoted);
  assert_int_equal(c->line, 4);
  prm_node_t *d = prm_node_path(n, "b.d");
  assert_int_equal(d->kind, PRM_NODE_LIST);
  assert_int_equal(d->n, 2);
  assert_string_equal(d->items[1]->str, "y z");
  prm_node_t *e = prm_node_get(n, "e");
  assert_int_equal(e->items[1]->line, 8);
  assert_int_equal(prm_node_get(n, "f")->kind, PRM_NODE_NULL);
  assert_int_equal(prm_node_get(n, "g")->kind, PRM_NODE_NULL);
  assert_int_equal(prm_node_get(n, "h")->kind, PRM_NODE_NULL);
  assert_int_equal(prm_node_get(n, "i")->kind, PRM_NODE_SCALAR);
  assert_null(prm_node_path(n, "b.zz"));
  prm_node_free(n);

  const char *dup = "a: 1\nb: 2\na: 3\n";
  assert_int_equal(prm_yaml_parse(dup, strlen(dup), "d.yaml", &n, &err), PRM_EPARSE);
  assert_null(n);
  assert_string_equal(err.msg, "d.yaml:3: duplicate key \"a\" (first at line 1)");
  const char *alias = "a: &x 1\nb: *x\n";
  assert_int_equal(prm_yaml_parse(alias, strlen(alias), "al.yaml", &n, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "al.yaml:1: anchors and aliases"));
}

static void test_yaml_malformed(void **state) {
  (void)state;
  prm_node_t *n = NULL;
  prm_err_t err = {0};
  const char *bad = "a: 1\nb: 2\nc: d: e\nf: 4\n";
  assert_int_equal(prm_yaml_parse(bad, strlen(bad), "bad.yaml", &n, &err), PRM_EPARSE);
  assert_null(n);
  assert_string_equal(err.msg, "bad.yaml:3: mapping values are not allowed in this context");
  const char *tab = "a: 1\nb:\n\t- x\n";
  assert_int_equal(prm_yaml_parse(tab, strlen(tab), "tab.yaml", &n, &err), PRM_EPARSE);
  assert_true(prm_startswith(err.msg, "tab.yaml:3: "));
  /* The same through a file and an experiment load. */
  char *p = tmp_file("malformed.yaml", "work_group: x\nmodules:\n  pre_trainer:\n    model: [a, b\n");
  load_fails(p, NULL, 0, PRM_EPARSE, "malformed.yaml:");
  free(p);
}

static void test_yaml_emit(void **state) {
  (void)state;
  prm_node_t *m = prm_node_new(PRM_NODE_MAP, "x.yaml", 1);
  prm_node_set(m, "plain", prm_node_new_scalar("abc", "x.yaml", 2));
  prm_node_t *q = prm_node_new_scalar("123", "x.yaml", 3);
  q->quoted = 1;
  prm_node_set(m, "quoted_number", q);
  prm_node_set(m, "number", prm_node_new_scalar("123", "x.yaml", 4));
  prm_node_set(m, "tricky", prm_node_new_scalar("a: b # \"c\"\n\\", "x.yaml", 5));
  prm_node_set(m, "empty", prm_node_new_scalar("", "x.yaml", 6));
  prm_node_set(m, "nothing", prm_node_new(PRM_NODE_NULL, "x.yaml", 7));
  prm_node_t *l = prm_node_new(PRM_NODE_LIST, "x.yaml", 8);
  prm_node_push(l, prm_node_new_scalar("-dash", "x.yaml", 8));
  prm_node_t *inner = prm_node_new(PRM_NODE_MAP, "x.yaml", 9);
  prm_node_set(inner, "k", prm_node_new_scalar("v", "x.yaml", 9));
  prm_node_push(l, inner);
  prm_node_set(m, "list", l);
  prm_node_set(m, "empty_map", prm_node_new(PRM_NODE_MAP, "x.yaml", 10));
  prm_sb_t sb = {0};
  prm_yaml_emit(m, &sb, 0);
  assert_non_null(strstr(prm_sb_str(&sb), "quoted_number: \"123\"\n"));
  assert_non_null(strstr(prm_sb_str(&sb), "number: 123\n"));
  assert_non_null(strstr(prm_sb_str(&sb), "nothing: null\n"));
  prm_node_t *back = NULL;
  prm_err_t err = {0};
  if (prm_yaml_parse(sb.buf, sb.len, "back.yaml", &back, &err)) fail_msg("%s\n%s", err.msg, sb.buf);
  assert_string_equal(prm_node_get(back, "tricky")->str, "a: b # \"c\"\n\\");
  assert_true(prm_node_get(back, "quoted_number")->quoted);
  assert_string_equal(prm_node_get(back, "empty")->str, "");
  assert_int_equal(prm_node_get(back, "nothing")->kind, PRM_NODE_NULL);
  assert_string_equal(prm_node_path(back, "list")->items[0]->str, "-dash");
  assert_string_equal(prm_node_get(prm_node_path(back, "list")->items[1], "k")->str, "v");
  assert_int_equal(prm_node_get(back, "empty_map")->kind, PRM_NODE_MAP);
  prm_node_free(back);
  prm_sb_reset(&sb);
  prm_yaml_emit(m, &sb, 1);
  assert_non_null(strstr(prm_sb_str(&sb), "# x.yaml:4\n"));
  prm_sb_free(&sb);
  prm_node_free(m);
}

/* ---- tree operations ---------------------------------------------------- */

static void test_node_ops(void **state) {
  (void)state;
  const char *a_text = "x: 1\nm:\n  p: 1\n  q: 2\nl: [1, 2]\n";
  const char *b_text = "y: 2\nm:\n  q: 20\n  r: 30\nl: [3]\n";
  prm_node_t *a = NULL, *b = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_yaml_parse(a_text, strlen(a_text), "a", &a, &err), 0);
  assert_int_equal(prm_yaml_parse(b_text, strlen(b_text), "b", &b, &err), 0);
  prm_node_merge(a, b);
  assert_string_equal(prm_node_path(a, "m.p")->str, "1");
  assert_string_equal(prm_node_path(a, "m.q")->str, "20");
  assert_string_equal(prm_node_path(a, "m.q")->file, "b");
  assert_string_equal(prm_node_path(a, "m.r")->str, "30");
  assert_int_equal(prm_node_path(a, "l")->n, 1); /* lists replace */
  assert_string_equal(prm_node_path(b, "m.q")->str, "20"); /* src untouched */
  prm_node_set_path(a, "n.o.p", prm_node_new_scalar("deep", "<cli>", 0));
  assert_string_equal(prm_node_path(a, "n.o.p")->str, "deep");
  prm_node_t *c = prm_node_clone(a);
  assert_int_equal(prm_node_remove(a, "x"), 1);
  assert_int_equal(prm_node_remove(a, "x"), 0);
  assert_null(prm_node_get(a, "x"));
  assert_string_equal(prm_node_get(c, "x")->str, "1");
  assert_string_equal(prm_node_path(c, "n.o.p")->str, "deep");
  prm_node_free(a);
  prm_node_free(b);
  prm_node_free(c);
}

static void test_env_expand(void **state) {
  (void)state;
  const char *text = "a: ${A}\n"
                     "b: ${B:fallback}\n"
                     "c: pre-${A}-${NOPE:${ALSO_NOPE:x}}-post\n"
                     "d: $${LITERAL}\n"
                     "e: ${E_EMPTY:default}\n"
                     "f: ${NOPE:null}\n";
  prm_node_t *n = NULL;
  prm_err_t err = {0};
  prm_env_t env = {0};
  prm_env_set(&env, "A", "alpha");
  prm_env_set(&env, "E_EMPTY", "");
  assert_int_equal(prm_yaml_parse(text, strlen(text), "v.yaml", &n, &err), 0);
  assert_int_equal(prm_node_expand_env(n, &env, &err), 0);
  assert_string_equal(prm_node_get(n, "a")->str, "alpha");
  assert_string_equal(prm_node_get(n, "b")->str, "fallback");
  assert_string_equal(prm_node_get(n, "c")->str, "pre-alpha-x-post");
  assert_string_equal(prm_node_get(n, "d")->str, "${LITERAL}");
  assert_int_equal(prm_node_get(n, "e")->kind, PRM_NODE_NULL); /* set but empty */
  assert_int_equal(prm_node_get(n, "f")->kind, PRM_NODE_NULL);
  prm_node_free(n);

  const char *missing = "ok: 1\nneeds: [a, \"${PRM_TEST_SURELY_UNSET}\"]\n";
  assert_int_equal(prm_yaml_parse(missing, strlen(missing), "m.yaml", &n, &err), 0);
  assert_int_equal(prm_node_expand_env(n, &env, &err), PRM_ECONFIG);
  assert_string_equal(err.msg, "m.yaml:2: ${PRM_TEST_SURELY_UNSET} is not set");
  prm_node_free(n);
  const char *broken = "x: ${UNCLOSED\n";
  assert_int_equal(prm_yaml_parse(broken, strlen(broken), "u.yaml", &n, &err), 0);
  assert_int_equal(prm_node_expand_env(n, &env, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "u.yaml:1: bad variable reference"));
  prm_node_free(n);
  prm_env_free(&env);
}

/* ---- experiments -------------------------------------------------------- */

static void test_extends(void **state) {
  (void)state;
  char *p1 = tmp_file("ext/base/common.yaml", "workspace: /base/ws\n"
                                              "exp_name: from_common\n"
                                              "modules:\n"
                                              "  pre_trainer:\n"
                                              "    model: llama_tiny.yaml\n"
                                              "    overrides:\n"
                                              "      train_iters: 5\n"
                                              "      weight_decay: 0.2\n");
  char *p2 = tmp_file("ext/base/more.yaml", "extends: common.yaml\n"
                                            "modules:\n"
                                            "  pre_trainer:\n"
                                            "    overrides:\n"
                                            "      train_iters: 6\n"
                                            "      seed: 7\n");
  char *p3 = tmp_file("ext/sub/list.yaml", "extends:\n"
                                           "  - ../base/common.yaml\n"
                                           "  - ../base/more.yaml\n"
                                           "exp_name: listed\n"
                                           "modules:\n"
                                           "  pre_trainer:\n"
                                           "    overrides:\n"
                                           "      train_iters: 8\n");
  char *p4 = tmp_file("ext/sub/scalar.yaml", "extends: ../base/common.yaml\n");
  prm_exp_t *e = load_ok(p3, NULL, 0);
  assert_int_equal(get_int(e, "train_iters"), 8); /* the file itself wins */
  assert_int_equal(get_int(e, "seed"), 7);         /* from the later base */
  assert_true(get_f64(e, "weight_decay") == 0.2);  /* deep-merged from the first */
  assert_string_equal(prm_exp_top(e, "exp_name"), "listed");
  assert_string_equal(prm_exp_top(e, "workspace"), "/base/ws");
  assert_origin(e, "seed", "ext/base/more.yaml:6");
  /* Inputs: the file, its chain, the presets; absolute; no repeats. */
  const prm_argv_t *in = prm_exp_inputs(e);
  assert_true(in->n >= 5);
  assert_true(prm_endswith(in->v[0], "ext/sub/list.yaml"));
  assert_true(prm_endswith(in->v[1], "ext/base/common.yaml"));
  assert_true(prm_endswith(in->v[2], "ext/base/more.yaml"));
  assert_int_equal(prm_argv_find(in, in->v[1]), 1);
  for (int i = 0; i < in->n; i++) assert_int_equal(in->v[i][0], '/');
  assert_true(prm_argv_find(in, in->v[in->n - 1]) == in->n - 1);
  prm_exp_free(e);

  e = load_ok(p4, NULL, 0);
  assert_int_equal(get_int(e, "train_iters"), 5);
  assert_string_equal(prm_exp_top(e, "exp_name"), "from_common");
  prm_exp_free(e);

  char *c1 = tmp_file("cyc/one.yaml", "extends: two.yaml\n");
  char *c2 = tmp_file("cyc/two.yaml", "extends: [three.yaml]\n");
  char *c3 = tmp_file("cyc/three.yaml", "extends: one.yaml\n");
  load_fails(c1, NULL, 0, PRM_ECONFIG, "three.yaml:1: extends cycle: ");
  load_fails(c1, NULL, 0, PRM_ECONFIG, "one.yaml -> ");
  load_fails(c1, NULL, 0, PRM_ECONFIG, "two.yaml -> ");
  char *self = tmp_file("cyc/self.yaml", "extends: ./self.yaml\n");
  load_fails(self, NULL, 0, PRM_ECONFIG, "extends cycle");
  char *gone = tmp_file("cyc/gone.yaml", "x: 1\nextends: nowhere.yaml\n");
  load_fails(gone, NULL, 0, PRM_ENOENT, "gone.yaml:2: ");
  load_fails(gone, NULL, 0, PRM_ENOENT, "nowhere.yaml");
  free(p1), free(p2), free(p3), free(p4), free(c1), free(c2), free(c3), free(self), free(gone);
}

static void test_vars(void **state) {
  (void)state;
  char *p = write_exp("vars.yaml", "${PRM_TEST_MODEL:llama_tiny}.yaml",
                      "      lr: ${PRM_TEST_LR:3e-4}\n"
                      "      save: ${PRM_TEST_SAVE:null}\n");
  unsetenv("PRM_TEST_LR");
  unsetenv("PRM_TEST_MODEL");
  prm_exp_t *e = load_ok(p, NULL, 0);
  assert_true(get_f64(e, "lr") == 3e-4);
  assert_null(prm_exp_get_str(e, "save"));
  assert_int_equal(get_int(e, "hidden_size"), 128);
  prm_exp_free(e);
  setenv("PRM_TEST_LR", "0.5", 1);
  setenv("PRM_TEST_MODEL", "llama_124M", 1);
  setenv("PRM_TEST_SAVE", "/ckpt", 1);
  e = load_ok(p, NULL, 0);
  assert_true(get_f64(e, "lr") == 0.5);
  assert_string_equal(prm_exp_get_str(e, "save"), "/ckpt");
  assert_int_equal(get_int(e, "hidden_size"), 768);
  prm_exp_free(e);
  setenv("PRM_TEST_LR", "fast", 1);
  load_fails(p, NULL, 0, PRM_ECONFIG, "vars.yaml:10: lr: expected a number, got \"fast\"");
  unsetenv("PRM_TEST_LR");
  unsetenv("PRM_TEST_MODEL");
  unsetenv("PRM_TEST_SAVE");
  free(p);
  p = write_exp("vars_req.yaml", "llama_tiny", "      seed: ${PRM_TEST_REQUIRED_SEED}\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "vars_req.yaml:10: ${PRM_TEST_REQUIRED_SEED} is not set");
  free(p);
}

static void test_precedence(void **state) {
  (void)state;
  char *mb = tmp_file("prec/models/m_base.yaml", "extends: m_root.yaml\n"
                                                 "rotary_base: 111\n"
                                                 "norm_epsilon: 1.0e-6\n");
  char *mr = tmp_file("prec/models/m_root.yaml", "init_method_std: 0.5\nrotary_base: 1\n");
  char *m = tmp_file("prec/models/m.yaml", "extends: m_base.yaml\n"
                                           "hidden_size: 64\n"
                                           "num_layers: 2\n"
                                           "num_attention_heads: 4\n"
                                           "vocab_size: 256\n"
                                           "seq_length: 32\n"
                                           "rotary_base: 222\n");
  char *pb = tmp_file("prec/base.yaml", "modules:\n"
                                        "  pre_trainer:\n"
                                        "    overrides:\n"
                                        "      train_iters: 11\n"
                                        "      seed: 12\n");
  char *x = tmp_file("prec/exp.yaml", "extends: base.yaml\n"
                                      "modules:\n"
                                      "  pre_trainer:\n"
                                      "    framework: native\n"
                                      "    model: ./models/m.yaml\n"
                                      "    overrides:\n"
                                      "      seq_length: 48\n"
                                      "      seed: 13\n"
                                      "      lr: 0.25\n");
  prm_override_t ov[] = {{"lr", "0.125"}, {"modules.pre_trainer.micro-batch-size", "4"},
                         {"exp_name", "from_cli"}, {"overrides.fault_tolerance.max_restarts", "9"}};
  prm_exp_t *e = load_ok(x, ov, 4);
  assert_true(get_f64(e, "lr") == 0.125);              /* CLI > overrides */
  assert_origin(e, "lr", "<cli>");
  assert_int_equal(get_int(e, "micro_batch_size"), 4);
  assert_int_equal(get_int(e, "fault_tolerance.max_restarts"), 9);
  assert_int_equal(get_int(e, "seq_length"), 48);      /* overrides > model preset */
  assert_origin(e, "seq_length", "prec/exp.yaml:7");
  assert_int_equal(get_int(e, "seed"), 13);            /* file > its extends */
  assert_int_equal(get_int(e, "train_iters"), 11);     /* extends' overrides > presets */
  assert_int_equal(get_int(e, "rotary_base"), 222);    /* preset > its extends */
  assert_true(get_f64(e, "norm_epsilon") == 1e-6);     /* from the preset's extends */
  assert_true(get_f64(e, "init_method_std") == 0.5);   /* two levels down */
  assert_true(get_f64(e, "adam_beta2") == 0.95);       /* module preset default */
  assert_origin(e, "adam_beta2", "configs/modules/native/pre_trainer.yaml:39");
  assert_int_equal(get_int(e, "hidden_size"), 64);     /* model > module preset */
  assert_string_equal(prm_exp_top(e, "exp_name"), "from_cli");
  assert_string_equal(prm_exp_top(e, "work_group"), "default");
  assert_string_equal(prm_exp_top(e, "workspace"), "./output");
  assert_string_equal(prm_exp_module(e), "pre_trainer");
  int b = -1;
  assert_int_equal(prm_exp_get_bool(e, "bf16", &b), 0);
  assert_int_equal(b, 0);
  int64_t i;
  assert_int_equal(prm_exp_get_int(e, "save", &i), PRM_EUNKNOWN);     /* null */
  assert_int_equal(prm_exp_get_int(e, "no_such", &i), PRM_EUNKNOWN);
  assert_int_equal(prm_exp_get_int(e, "lr_decay_style", &i), PRM_EINVAL);
  assert_int_equal(prm_exp_get_int(e, "fault_tolerance", &i), PRM_EINVAL);
  assert_string_equal(prm_exp_get_str(e, "lr_decay_style"), "cosine");
  assert_null(prm_exp_origin(e, "no_such"));
  prm_exp_free(e);
  /* Without the CLI the overrides value stands. */
  e = load_ok(x, NULL, 0);
  assert_true(get_f64(e, "lr") == 0.25);
  assert_string_equal(prm_exp_top(e, "exp_name"), "exp"); /* the file stem */
  prm_exp_free(e);
  /* CLI can pick another model; the module can be chosen by name. */
  prm_override_t mo[] = {{"model", "llama_tiny"}};
  e = load_ok(x, mo, 1);
  assert_int_equal(get_int(e, "hidden_size"), 128);
  prm_exp_free(e);
  prm_err_t err = {0};
  assert_int_equal(prm_exp_load(x, NULL, 0, "post_trainer", &e, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "no module \"post_trainer\""));
  free(mb), free(mr), free(m), free(x), free(pb);
}

static void test_unknown_keys(void **state) {
  (void)state;
  char *p = write_exp("unk.yaml", "llama_tiny", "      hiden_size: 64\n");
  load_fails(p, NULL, 0, PRM_ECONFIG,
             "unk.yaml:10: unknown key \"hiden_size\" (did you mean \"hidden_size\"?)");
  free(p);
  p = write_exp("unk2.yaml", "llama_tiny", "      fault_tolerance:\n        max_restart: 1\n");
  load_fails(p, NULL, 0, PRM_ECONFIG,
             "unk2.yaml:11: unknown key \"fault_tolerance.max_restart\" (did you mean "
             "\"fault_tolerance.max_restarts\"?)");
  free(p);
  p = write_exp("unk3.yaml", "llama_tiny", "      hidden-size: 64\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "did you mean \"hidden_size\"");
  free(p);
  p = tmp_file("unk4.yaml", "exp_nam: x\nmodules:\n  pre_trainer:\n    model: llama_tiny\n");
  load_fails(p, NULL, 0, PRM_ECONFIG,
             "unk4.yaml:1: unknown top-level key \"exp_nam\" (did you mean \"exp_name\"?)");
  free(p);
  p = tmp_file("unk5.yaml", "modules:\n  pre_trainer:\n    modle: llama_tiny\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "unk5.yaml:3: unknown module key \"modle\" (did you mean \"model\"?)");
  free(p);
  p = tmp_file("unk6.yaml", "modules:\n  pre_traner:\n    model: llama_tiny\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "did you mean \"pre_trainer\"");
  free(p);
  p = write_exp("unk7.yaml", "llama_tiny", NULL);
  prm_override_t ov[] = {{"hiden-size", "64"}};
  load_fails(p, ov, 1, PRM_ECONFIG, "<cli>: unknown key \"hiden_size\" (did you mean \"hidden_size\"?)");
  prm_override_t ov2[] = {{"zzzzzz_qqqq", "1"}};
  load_fails(p, ov2, 1, PRM_ECONFIG, "<cli>: unknown key \"zzzzzz_qqqq\"");
  free(p);
  p = write_exp("unk8.yaml", "megatron_llama", NULL);
  load_fails(p, NULL, 0, PRM_ENOENT, "unk8.yaml:7: model preset \"megatron_llama\" not found");
  free(p);
  p = write_exp("unk9.yaml", "llama_tinny.yaml", NULL);
  load_fails(p, NULL, 0, PRM_ENOENT, "(did you mean \"llama_tiny\"?)");
  free(p);
}

static void test_types_and_ranges(void **state) {
  (void)state;
  static const struct {
    const char *line, *msg;
  } cases[] = {
      {"      lr: fast\n", "t.yaml:10: lr: expected a number, got \"fast\""},
      {"      lr: -1\n", "t.yaml:10: lr: must be >= 0, got -1"},
      {"      adam_beta1: 1.0\n", "t.yaml:10: adam_beta1: must be in [0, 1), got 1.0"},
      {"      micro_batch_size: 0\n", "t.yaml:10: micro_batch_size: must be >= 1, got 0"},
      {"      train_iters: 2.5\n", "t.yaml:10: train_iters: expected an integer, got \"2.5\""},
      {"      bf16: maybe\n", "t.yaml:10: bf16: expected true or false, got \"maybe\""},
      {"      lr_decay_style: wavy\n",
       "t.yaml:10: lr_decay_style: expected one of cosine|linear|constant, got \"wavy\""},
      {"      recompute_granularity: some\n", "expected one of full|selective or null"},
      {"      fault_tolerance:\n        nan_policy: ignore\n",
       "t.yaml:11: fault_tolerance.nan_policy: expected one of stop|skip|rollback"},
      {"      lr: [1, 2]\n", "t.yaml:10: lr: expected a number, got a list"},
      {"      seed: null\n", "t.yaml:10: seed: expected an integer, got null"},
      {"      data_path: {a: 1}\n", "t.yaml:10: data_path: expected a string or a list"},
      {"      fault_tolerance: 3\n", "t.yaml:10: fault_tolerance: expected a map"},
      {"      metrics_port: 70000\n", "metrics_port: must be in [0, 65535], got 70000"},
      {"      alert_throughput_window_s: 10\n", "alert_throughput_window_s: must be in [60, 604800], got 10"},
      {"      alert_throughput_fraction: 1\n", "alert_throughput_fraction: must be in [0, 1), got 1"},
      {"      alert_throughput_fraction: half\n", "alert_throughput_fraction: expected a number"},
      {"      num_query_groups: 3\n", "num_query_groups: must divide num_attention_heads (4)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *p = write_exp("t.yaml", "llama_tiny", cases[i].line);
    load_fails(p, NULL, 0, PRM_ECONFIG, cases[i].msg);
    free(p);
  }
  char *p = write_exp("t.yaml", "llama_tiny", NULL);
  prm_override_t bad[] = {{"lr", "x"}};
  load_fails(p, bad, 1, PRM_ECONFIG, "<cli>: lr: expected a number, got \"x\"");
  prm_override_t bad2[] = {{"modules.pre_trainer", "x"}};
  load_fails(p, bad2, 1, PRM_ECONFIG, "<cli>: modules.pre_trainer: set one key");
  free(p);
  /* Lenient coercion: quoted numbers, 1e3 integers, yes/no, data_path lists. */
  p = write_exp("ok.yaml", "llama_tiny",
                "      micro_batch_size: \"8\"\n"
                "      train_iters: 1e3\n"
                "      bf16: yes\n"
                "      tokenizer_model: 123\n"
                "      data_path: [\"0.3\", /a/b, 0.7, /c/d]\n"
                "      recompute_granularity: null\n");
  prm_override_t good[] = {{"eval-iters", "0"}, {"data_shuffle", "off"}};
  prm_exp_t *e = load_ok(p, good, 2);
  assert_int_equal(get_int(e, "micro_batch_size"), 8);
  assert_int_equal(get_int(e, "train_iters"), 1000);
  assert_string_equal(prm_exp_get_str(e, "train_iters"), "1000");
  int b = 0;
  assert_int_equal(prm_exp_get_bool(e, "bf16", &b), 0);
  assert_int_equal(b, 1);
  assert_int_equal(prm_exp_get_bool(e, "data_shuffle", &b), 0);
  assert_int_equal(b, 0);
  assert_string_equal(prm_exp_get_str(e, "tokenizer_model"), "123");
  const prm_node_t *dp = prm_exp_get(e, "data_path");
  assert_int_equal(dp->kind, PRM_NODE_LIST);
  assert_int_equal(dp->n, 4);
  assert_string_equal(dp->items[3]->str, "/c/d");
  assert_int_equal(get_int(e, "eval_iters"), 0);
  prm_exp_free(e);
  free(p);
}

static void test_fixtures(void **state) {
  (void)state;
  char *p = prm_path_join(PRM_TEST_FIXTURES, "config/tiny.yaml");
  prm_exp_t *e = load_ok(p, NULL, 0);
  assert_int_equal(get_int(e, "train_iters"), 4);
  assert_origin(e, "train_iters", "config/tiny.yaml:16");
  assert_string_equal(prm_exp_top(e, "exp_name"), "tiny");
  prm_exp_free(e);
  free(p);
  p = prm_path_join(PRM_TEST_FIXTURES, "config/bad-lr.yaml");
  load_fails(p, NULL, 0, PRM_ECONFIG, "config/bad-lr.yaml:12: lr: expected a number, got \"fast\"");
  free(p);
  p = prm_path_join(PRM_TEST_FIXTURES, "config/malformed.yaml");
  load_fails(p, NULL, 0, PRM_EPARSE, "config/malformed.yaml:4: mapping values are not allowed");
  free(p);
}

static void test_missing_file(void **state) {
  (void)state;
  load_fails("/nonexistent/primus/exp.yaml", NULL, 0, PRM_ENOENT, "/nonexistent/primus/exp.yaml");
  prm_node_t *n = (prm_node_t *)1;
  prm_err_t err = {0};
  assert_int_equal(prm_yaml_load("/nonexistent/x.yaml", &n, &err), PRM_ENOENT);
  assert_null(n);
  assert_non_null(strstr(err.msg, "/nonexistent/x.yaml"));
  char *p = tmp_file("nomod.yaml", "work_group: x\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "modules");
  free(p);
  p = tmp_file("list.yaml", "- a\n- b\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "list.yaml:1: expected a map");
  free(p);
  p = tmp_file("fw.yaml", "modules:\n  pre_trainer:\n    framework: torchtitan\n    model: llama_tiny\n");
  load_fails(p, NULL, 0, PRM_ECONFIG,
             "fw.yaml:3: framework: primus runs \"megatron\" and \"native\" experiments (both on its "
             "own engine), got \"torchtitan\" (another engine");
  free(p);
}

/* ---- shipped presets and examples ---------------------------------------- */

static void test_shipped_presets(void **state) {
  (void)state;
  char *dir = prm_path_join(prm_home(), "configs/models/native");
  prm_argv_t names = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_fs_list_dir(dir, &names, &err), 0);
  int models = 0;
  for (int i = 0; i < names.n; i++) {
    if (!prm_endswith(names.v[i], ".yaml") || !strcmp(names.v[i], "llama_base.yaml")) continue;
    char *p = write_exp("shipped.yaml", names.v[i], NULL);
    prm_exp_t *e = load_ok(p, NULL, 0);
    int64_t params = 0;
    if (prm_exp_model_params(e, &params, &err)) fail_msg("%s: %s", names.v[i], err.msg);
    assert_true(params > 100000);
    prm_exp_free(e);
    free(p);
    models++;
  }
  assert_true(models >= 5);
  prm_argv_free(&names);
  free(dir);

  /* The module preset names every key of the schema, and nothing else. */
  char *pre = prm_path_join(prm_home(), "configs/modules/native/pre_trainer.yaml");
  prm_node_t *n = NULL;
  assert_int_equal(prm_yaml_load(pre, &n, &err), 0);
  int count = 0;
  const prm_key_t *keys = prm_schema_keys(&count);
  assert_true(count >= 60);
  int native = 0;
  for (int i = 0; i < count; i++) {
    if (!prm_node_path(n, keys[i].key)) fail_msg("pre_trainer.yaml lacks %s", keys[i].key);
    assert_true(keys[i].help && *keys[i].help);
    assert_ptr_equal(prm_schema_find(keys[i].key), &keys[i]);
    native += keys[i].native;
  }
  assert_int_equal(native, 22); /* fault_tolerance.node_wait_timeout_s the newest */
  assert_true(prm_schema_find("fault_tolerance.nan_policy")->native);
  assert_false(prm_schema_find("hidden_size")->native);
  assert_ptr_equal(prm_schema_find("global-batch-size"), prm_schema_find("global_batch_size"));
  assert_null(prm_schema_find("hiden_size"));
  assert_string_equal(prm_type_name(PRM_T_FLOAT), "float");
  prm_node_free(n);
  free(pre);

  /* Every example resolves with its defaults. */
  static const char *const vars[] = {"DATA", "DATA_PATH", "LR", "TRAIN_ITERS", "MOCK", "LOAD",
                                     "PRIMUS_WORKSPACE", "OMP_NUM_THREADS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  dir = prm_path_join(prm_home(), "configs/examples");
  assert_int_equal(prm_fs_list_dir(dir, &names, &err), 0);
  int examples = 0;
  for (int i = 0; i < names.n; i++) {
    if (!prm_endswith(names.v[i], ".yaml")) continue;
    char *p = prm_path_join(dir, names.v[i]);
    prm_exp_t *e = load_ok(p, NULL, 0);
    int64_t params = 0;
    assert_int_equal(prm_exp_model_params(e, &params, &err), 0);
    prm_exp_free(e);
    free(p);
    examples++;
  }
  assert_true(examples >= 3);
  prm_argv_free(&names);
  free(dir);
}

static void test_params(void **state) {
  (void)state;
  static const struct {
    const char *model;
    int64_t params;
  } cases[] = {
      {"llama2_7B", 6738415616LL},
      {"llama3_8B", 8030261248LL},
      {"llama3.1_70B", 70553706496LL},
      {"llama_tiny", 771200LL},
  };
  prm_err_t err = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *p = write_exp("params.yaml", cases[i].model, NULL);
    prm_exp_t *e = load_ok(p, NULL, 0);
    int64_t n = 0;
    assert_int_equal(prm_exp_model_params(e, &n, &err), 0);
    if (n != cases[i].params) fail_msg("%s: %lld params, want %lld", cases[i].model, (long long)n, (long long)cases[i].params);
    prm_exp_free(e);
    free(p);
  }
  /* Tying the head removes V*H parameters. */
  char *p = write_exp("params.yaml", "llama2_7B", "      untie_embeddings_and_output_weights: false\n");
  prm_exp_t *e = load_ok(p, NULL, 0);
  int64_t n = 0;
  assert_int_equal(prm_exp_model_params(e, &n, &err), 0);
  assert_true(n == 6738415616LL - 32000LL * 4096);
  prm_exp_free(e);
  free(p);
}

/* ---- dump and round trip ------------------------------------------------- */

static void assert_same_keys(const prm_exp_t *a, const prm_exp_t *b) {
  int count = 0;
  const prm_key_t *keys = prm_schema_keys(&count);
  for (int i = 0; i < count; i++) {
    const prm_node_t *x = prm_exp_get(a, keys[i].key), *y = prm_exp_get(b, keys[i].key);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(x->kind, y->kind);
    if (x->kind == PRM_NODE_SCALAR && strcmp(x->str, y->str))
      fail_msg("%s: \"%s\" became \"%s\"", keys[i].key, x->str, y->str);
    assert_int_equal(x->n, y->n);
    for (int j = 0; j < x->n && x->kind == PRM_NODE_LIST; j++)
      assert_string_equal(x->items[j]->str, y->items[j]->str);
  }
  static const char *const top[] = {"work_group", "user_name", "exp_name", "workspace"};
  for (int i = 0; i < 4; i++) assert_string_equal(prm_exp_top(a, top[i]), prm_exp_top(b, top[i]));
}

static void test_round_trip(void **state) {
  (void)state;
  char *p = tmp_file("rt/exp.yaml", "work_group: \"007\"\n"
                                    "exp_name: \"round trip: yes\"\n"
                                    "env:\n"
                                    "  NCCL_DEBUG: WARN\n"
                                    "  LITERAL: \"$${HOME}\"\n"
                                    "modules:\n"
                                    "  pre_trainer:\n"
                                    "    framework: native\n"
                                    "    config: pre_trainer\n"
                                    "    model: ../rt_models/mine.yaml\n"
                                    "    overrides:\n"
                                    "      save: \"x; rm -rf ~\"\n"
                                    "      data_path: [\"1\", '/data/a b', \"-x\"]\n"
                                    "      split: \"98,2,0\"\n"
                                    "      tokenizer_model: \"true\"\n"
                                    "      fault_tolerance.hang_timeout_s: 30\n");
  char *mtext = prm_xasprintf("extends: %s/configs/models/native/llama_tiny.yaml\n"
                              "num_layers: 2\n", prm_home());
  char *m = tmp_file("rt_models/mine.yaml", mtext);
  free(mtext);
  prm_override_t ov[] = {{"load", "it's \"quoted\"\n"}, {"lr", "2.5e-4"}};
  prm_exp_t *e = load_ok(p, ov, 2);
  assert_string_equal(prm_exp_get_str(e, "save"), "x; rm -rf ~");
  assert_string_equal(prm_exp_get_str(e, "load"), "it's \"quoted\"\n");
  assert_string_equal(prm_exp_top(e, "exp_name"), "round trip: yes");
  assert_string_equal(prm_node_get(prm_exp_env(e), "LITERAL")->str, "${HOME}");
  assert_true(get_f64(e, "fault_tolerance.hang_timeout_s") == 30);
  assert_int_equal(get_int(e, "num_layers"), 2);

  /* Write, read back, compare every key. Twice, to show it is a fixpoint. */
  prm_err_t err = {0};
  char *out = prm_path_join(prm_test_tmpdir(), "elsewhere/resolved.yaml");
  char *outdir = prm_path_dirname(out);
  assert_int_equal(prm_fs_mkdir_p(outdir, 0755, &err), 0);
  assert_int_equal(prm_exp_write(e, out, &err), 0);
  prm_exp_t *back = load_ok(out, NULL, 0);
  assert_same_keys(e, back);
  assert_string_equal(prm_exp_get_str(back, "save"), "x; rm -rf ~");
  assert_string_equal(prm_node_get(prm_exp_env(back), "LITERAL")->str, "${HOME}");
  assert_string_equal(prm_node_get(prm_exp_env(back), "NCCL_DEBUG")->str, "WARN");
  assert_string_equal(prm_exp_module(back), "pre_trainer");
  prm_sb_t a = {0}, b = {0};
  prm_exp_dump(e, &a, 0);
  prm_exp_dump(back, &b, 0);
  assert_string_equal(prm_sb_str(&a), prm_sb_str(&b));
  prm_exp_free(back);

  /* With origins: real file:line for preset values, <cli> for the CLI. */
  prm_sb_reset(&a);
  prm_exp_dump(e, &a, 1);
  const char *s = prm_sb_str(&a);
  assert_non_null(strstr(s, "# <cli>"));
  assert_non_null(strstr(s, "configs/modules/native/pre_trainer.yaml:39\n")); /* adam_beta2 */
  assert_non_null(strstr(s, "configs/models/native/llama_tiny.yaml:5\n"));    /* hidden_size */
  assert_non_null(strstr(s, "rt/exp.yaml:12\n"));                             /* save */
  assert_null(strstr(s, "preset default"));
  const char *line = strstr(s, "    adam_beta2: 0.95");
  assert_non_null(line);
  assert_true(strchr(line, '\n') > strstr(line, "pre_trainer.yaml:39"));

  prm_sb_free(&a);
  prm_sb_free(&b);
  prm_exp_free(e);
  free(out);
  free(outdir);
  free(p);
  free(m);
}

/* ---- Primus' own configs (framework: megatron) ---------------------------- */

/* A Primus-style experiment: framework megatron, a model preset by Primus'
 * name, the module preset pre_trainer.yaml, and extra overrides lines. */
static char *write_megatron(const char *name, const char *model, const char *overrides) {
  char *text = prm_xasprintf("work_group: ${PRIMUS_TEAM:amd}\n"
                             "user_name: ${PRIMUS_USER:root}\n"
                             "exp_name: ${PRIMUS_EXP_NAME:%s}\n"
                             "workspace: ${PRIMUS_WORKSPACE:./output}\n"
                             "\n"
                             "modules:\n"
                             "  pre_trainer:\n"
                             "    framework: megatron\n"
                             "    config: pre_trainer.yaml\n"
                             "\n"
                             "    # model to run\n"
                             "    model: %s\n"
                             "    overrides:\n"
                             "      mock_data: true\n"
                             "%s",
                             name, model, overrides ? overrides : "");
  char *p = tmp_file(name, text);
  free(text);
  return p;
}

/* The model the keys describe, as the engine's parameter count reads it
 * (MoE and dense layers, GQA, tied or untied head). */
static prm_llama_config_t llama_config(const prm_exp_t *e) {
  prm_llama_config_t c = {0};
  c.hidden = get_int(e, "hidden_size");
  c.layers = get_int(e, "num_layers");
  c.heads = get_int(e, "num_attention_heads");
  c.vocab = get_int(e, "vocab_size");
  if (prm_exp_get_int(e, "num_query_groups", &c.groups)) c.groups = c.heads;
  if (prm_exp_get_int(e, "ffn_hidden_size", &c.ffn)) c.ffn = 4 * c.hidden;
  int untie = 0;
  prm_exp_get_bool(e, "untie_embeddings_and_output_weights", &untie);
  c.tied = !untie;
  if (prm_exp_get_int(e, "num_experts", &c.experts)) c.experts = 0;
  if (c.experts) {
    c.topk = get_int(e, "moe_router_topk");
    if (prm_exp_get_int(e, "moe_ffn_hidden_size", &c.moe_ffn)) c.moe_ffn = c.ffn;
    c.moe_freq = get_int(e, "moe_layer_freq");
  }
  return c;
}

static void test_megatron_presets(void **state) {
  (void)state;
  /* Published sizes: the parameter counts of the Hugging Face checkpoints,
   * matched exactly (a q/k/v bias more or less is 0.002%); Mixtral 8x22B
   * within 0.01%, Qwen3-1.7B within 2% of its card's 1.7B (its checkpoint
   * stores the tied head twice). */
  static const struct {
    const char *model;
    double published;
  } cases[] = {
      {"llama2_7B.yaml", 6738415616.0},       {"llama2_13B", 13015864320.0},
      {"llama2_70B", 68976648192.0},          {"llama3_8B.yaml", 8030261248.0},
      {"llama3_70B", 70553706496.0},          {"llama3.1_8B", 8030261248.0},
      {"llama3.1_70B", 70553706496.0},        {"llama3.1_405B", 405853388800.0},
      {"llama3.2_1B", 1235814400.0},          {"llama3.2_3B", 3212749824.0},
      {"llama3.3_70B", 70553706496.0},        {"qwen2.5_0.5B", 494032768.0},
      {"qwen2.5_1.5B", 1543714304.0},         {"qwen2.5_3B", 3085938688.0},
      {"qwen2.5_7B.yaml", 7615616512.0},      {"qwen2.5_14B", 14770033664.0},
      {"qwen2.5_32B", 32763876352.0},         {"qwen2.5_72B", 72706203648.0},
      {"qwen3_0.6B", 596049920.0},            {"qwen3_1.7B", 1.7e9},
      {"qwen3_4B", 4022468096.0},             {"qwen3_8B", 8190735360.0},
      {"qwen3_14B", 14768307200.0},           {"qwen3_32B", 32762123264.0},
      {"mixtral_8x7B_v0.1.yaml", 46702792704.0}, {"mixtral_8x22B_v0.1", 140620634112.0},
      {"qwen3_30B_A3B", 30532122624.0},       {"qwen3_235B_A22B", 235093634560.0},
  };
  prm_err_t err = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *p = write_megatron("preset.yaml", cases[i].model, NULL);
    prm_exp_t *e = load_ok(p, NULL, 0);
    assert_string_equal(prm_exp_framework(e), "megatron");
    int64_t n = 0;
    assert_int_equal(prm_exp_model_params(e, &n, &err), 0);
    double rel = ((double)n - cases[i].published) / cases[i].published;
    double tol = strstr(cases[i].model, "qwen3_1.7B")     ? 0.02
                 : strstr(cases[i].model, "mixtral_8x22B") ? 1e-4
                                                           : 0;
    if (rel > tol || rel < -tol)
      fail_msg("%s: %lld parameters, published %.0f (%+.3f%%)", cases[i].model, (long long)n,
               cases[i].published, 100 * rel);
    /* The engine's count (src/model/config.c) agrees wherever the heads are
     * hidden_size / num_attention_heads wide; q/k/v biases and q/k norms
     * are added here, as the engine does not have them yet. */
    prm_llama_config_t c = llama_config(e);
    int64_t d = c.hidden / c.heads, kv = 0;
    if (prm_exp_get_int(e, "kv_channels", &kv) || kv == d) {
      int64_t want = prm_llama_param_count(&c);
      int on = 0;
      if (!prm_exp_get_bool(e, "add_qkv_bias", &on) && on)
        want += c.layers * (c.heads + 2 * c.groups) * d;
      if (!prm_exp_get_bool(e, "qk_layernorm", &on) && on) want += c.layers * 2 * d;
      if (n != want)
        fail_msg("%s: config counts %lld, the engine %lld", cases[i].model, (long long)n,
                 (long long)want);
    }
    prm_exp_free(e);
    free(p);
  }
  /* Every megatron model preset (not the shared bases) is in the table. */
  char *dir = prm_path_join(prm_home(), "configs/models/megatron");
  prm_argv_t names = {0};
  assert_int_equal(prm_fs_list_dir(dir, &names, &err), 0);
  for (int i = 0; i < names.n; i++) {
    if (!prm_endswith(names.v[i], ".yaml") || strstr(names.v[i], "base") ||
        !strcmp(names.v[i], "language_model.yaml"))
      continue;
    int seen = 0;
    for (size_t j = 0; j < sizeof cases / sizeof cases[0]; j++)
      seen |= !strncmp(cases[j].model, names.v[i], strlen(names.v[i]) - 5);
    if (!seen) fail_msg("%s has no published size in the test", names.v[i]);
  }
  prm_argv_free(&names);
  free(dir);
  /* Primus' chain: llama3_8B -> llama3_base -> llama_base -> language_model. */
  char *p = write_megatron("chain.yaml", "llama3_8B", NULL);
  prm_exp_t *e = load_ok(p, NULL, 0);
  const prm_argv_t *in = prm_exp_inputs(e);
  const char *want[] = {"llama3_8B.yaml", "llama3_base.yaml", "llama_base.yaml",
                        "language_model.yaml"};
  for (int i = 0; i < 4; i++) {
    int found = 0;
    for (int j = 0; j < in->n; j++) found |= prm_endswith(in->v[j], want[i]) && strstr(in->v[j], "megatron");
    if (!found) fail_msg("the chain lacks models/megatron/%s", want[i]);
  }
  assert_origin(e, "rotary_base", "configs/models/megatron/llama3_base.yaml:10");
  prm_exp_free(e);
  free(p);
}

/* The Llama 3 8B BF16 pretraining experiment as Primus ships it. */
static const char *const primus_llama3_overrides =
    "      wandb_project: \"Primus_DeepSeek_Pretrain\"\n"
    "      stderr_sink_level: DEBUG\n"
    "      log_avg_skip_iterations: 2\n"
    "      log_avg_reset_interval: 50\n"
    "      train_iters: 50\n"
    "      micro_batch_size: 2\n"
    "      global_batch_size: 16\n"
    "      seq_length: 8192\n"
    "      max_position_embeddings: 8192\n"
    "      lr: 1.0e-5\n"
    "      min_lr: 0.0\n"
    "      lr_warmup_iters: 2\n"
    "      lr_decay_iters: null\n"
    "      lr_decay_style: cosine\n"
    "      weight_decay: 0.1\n"
    "      adam_beta1: 0.9\n"
    "      adam_beta2: 0.95\n"
    "      eod_mask_loss: true\n"
    "      init_method_std: 0.008\n"
    "      norm_epsilon: 1.0e-6\n"
    "      tensor_model_parallel_size: 1\n"
    "      pipeline_model_parallel_size: 1\n"
    "      expert_model_parallel_size: 1\n"
    "      overlap_grad_reduce: true\n"
    "      overlap_param_gather: true\n"
    "      gradient_accumulation_fusion: false\n"
    "      train_data_path: null\n"
    "      valid_data_path: null\n"
    "      test_data_path: null\n"
    "      finetune: false\n"
    "      load: null\n"
    "      no_load_optim: null\n"
    "      no_load_rng: null\n"
    "      save: null\n"
    "      save_interval: 20000\n"
    "      no_save_optim: null\n"
    "      no_save_rng: null\n"
    "      disable_last_saving: true\n"
    "      ckpt_format: torch\n"
    "      enable_primus_turbo: true\n"
    "      use_turbo_attention: true\n"
    "      use_turbo_grouped_gemm: true\n"
    "      cross_entropy_fusion_impl: \"te\"\n"
    "      cross_entropy_loss_fusion: true\n";

static void test_megatron_keys(void **state) {
  (void)state;
  char *p = write_megatron("l3.yaml", "llama3_8B.yaml", primus_llama3_overrides);
  prm_override_t cli[] = {{"tensorboard-dir", "/tmp/tb"}};
  prm_exp_t *e = load_ok(p, cli, 1);
  prm_err_t err = {0};
  int64_t n = 0;
  assert_int_equal(prm_exp_model_params(e, &n, &err), 0);
  assert_true(n == 8030261248LL);
  /* The keys without effect, in the order set, the command line's last. */
  const prm_argv_t *ig = prm_exp_ignored(e);
  static const char *const want[] = {
      "wandb_project",  "stderr_sink_level",   "log_avg_skip_iterations", "log_avg_reset_interval",
      "overlap_param_gather", "gradient_accumulation_fusion", "ckpt_format",
      "enable_primus_turbo", "use_turbo_attention", "use_turbo_grouped_gemm",
      "cross_entropy_fusion_impl", "cross_entropy_loss_fusion", "tensorboard_dir"};
  assert_int_equal(ig->n, (int)(sizeof want / sizeof want[0]));
  for (int i = 0; i < ig->n; i++) assert_string_equal(ig->v[i], want[i]);
  /* Implemented keys keep their types; inert ones their text. */
  int on = 0;
  assert_int_equal(prm_exp_get_bool(e, "disable_last_saving", &on), 0);
  assert_true(on);
  assert_true(get_f64(e, "init_method_std") == 0.008);
  assert_string_equal(prm_exp_get_str(e, "cross_entropy_fusion_impl"), "te");
  /* Classes: implemented, inert (also by prefix), unsupported. */
  assert_int_equal(prm_schema_find("disable_last_saving")->cls, PRM_KEY_RUN);
  assert_int_equal(prm_schema_find("wandb_entity")->cls, PRM_KEY_INERT);
  assert_int_equal(prm_schema_find("use_turbo_rms_norm")->cls, PRM_KEY_INERT);
  assert_int_equal(prm_schema_find("log_interval")->cls, PRM_KEY_RUN);
  assert_int_equal(prm_schema_find("fp8")->cls, PRM_KEY_UNSUPPORTED);
  assert_null(prm_schema_find("fp8x"));
  prm_exp_free(e);
  free(p);

  /* Unsupported keys at their neutral values pass; other values fail, each
   * problem of the file listed with its line, not only the first. */
  p = write_megatron("neutral.yaml", "llama3_8B",
                     "      fp8: null\n"
                     "      hidden_dropout: 0.0\n"
                     "      normalization: RMSNorm\n"
                     "      swiglu: yes\n"
                     "      mtp_num_layers: 0\n");
  e = load_ok(p, NULL, 0);
  assert_int_equal(prm_exp_ignored(e)->n, 0);
  prm_exp_free(e);
  free(p);
  p = write_megatron("zarr.yaml", "llama3_8B", "      ckpt_format: zarr\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "zarr.yaml:15: ckpt_format: got \"zarr\": accepted as");
  free(p);
  /* Forced even routing is implemented (random router logits). */
  p = write_megatron("force.yaml", "mixtral_8x7B_v0.1", "      moe_router_force_load_balancing: true\n");
  e = load_ok(p, NULL, 0);
  assert_int_equal(prm_schema_find("moe_router_force_load_balancing")->cls, PRM_KEY_RUN);
  prm_exp_free(e);
  free(p);
  p = write_megatron("fp8.yaml", "llama3_8B", "      fp8: hybrid\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "fp8.yaml:15: fp8: got \"hybrid\": FP8 training");
  free(p);
  p = write_megatron("many.yaml", "llama3_8B",
                     "      fp8: e4m3\n"                  /* 15 */
                     "      hiden_size: 3\n"              /* 16 */
                     "      lr: fast\n"                   /* 17 */
                     "      multi_latent_attention: true\n" /* 18 */
                     "      wandb_project: ok\n"          /* 19: no problem */
                     "      normalization: LayerNorm\n"   /* 20 */
                     "      micro_batch_size: 3\n"        /* 21 */
                     "      global_batch_size: 16\n");    /* 22 */
  e = NULL;
  memset(&err, 0, sizeof err);
  assert_int_equal(prm_exp_load(p, NULL, 0, NULL, &e, &err), PRM_ECONFIG);
  assert_null(e);
  static const char *const probs[] = {
      "6 problems:\n",
      "many.yaml:15: fp8: got \"e4m3\"",
      "many.yaml:16: unknown key \"hiden_size\" (did you mean \"hidden_size\"?)",
      "many.yaml:17: lr: expected a number, got \"fast\"",
      "many.yaml:18: multi_latent_attention: got \"true\": multi-latent attention (MLA",
      "many.yaml:20: normalization: got \"LayerNorm\"",
      "many.yaml:22: global_batch_size: must be a multiple of micro_batch_size (3), got 16",
  };
  for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++)
    if (!strstr(err.msg, probs[i])) fail_msg("message \"%s\" lacks \"%s\"", err.msg, probs[i]);
  assert_null(strstr(err.msg, "wandb"));
  free(p);
  /* Problems outside the keys are listed with them: an unknown top-level
   * and module key, another engine's framework, a preset primus does not
   * have; the overrides are still checked (without the preset's defaults). */
  p = tmp_file("layout.yaml", "exp_nam: x\n"
                              "modules:\n"
                              "  pre_trainer:\n"
                              "    framework: torchtitan\n"
                              "    model: deepseek_v3\n"
                              "    overides: {}\n"
                              "    overrides:\n"
                              "      lr: fast\n"
                              "      fp8: e4m3\n");
  e = NULL;
  memset(&err, 0, sizeof err);
  assert_int_equal(prm_exp_load(p, NULL, 0, NULL, &e, &err), PRM_ECONFIG);
  static const char *const lay[] = {
      "6 problems:\n",
      "layout.yaml:1: unknown top-level key \"exp_nam\" (did you mean \"exp_name\"?)",
      "layout.yaml:6: unknown module key \"overides\" (did you mean \"overrides\"?)",
      "layout.yaml:4: framework: primus runs",
      "layout.yaml:5: model preset \"deepseek_v3\": DeepSeek's multi-latent attention",
      "layout.yaml:8: lr: expected a number, got \"fast\"",
      "layout.yaml:9: fp8: got \"e4m3\"",
  };
  for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++)
    if (!strstr(err.msg, lay[i])) fail_msg("message \"%s\" lacks \"%s\"", err.msg, lay[i]);
  assert_null(strstr(err.msg, "hidden_size"));
  free(p);
  /* Megatron's names are suggested too. */
  p = write_megatron("typo.yaml", "llama3_8B", "      wandb_projet: x\n      use_turbo_atention: 1\n");
  e = load_ok(p, NULL, 0); /* both are inert by their prefix */
  prm_exp_free(e);
  free(p);
  p = write_megatron("typo2.yaml", "llama3_8B", "      overlap_param_gathr: true\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "unknown key \"overlap_param_gathr\" (did you mean \"overlap_param_gather\"?)");
  free(p);
  /* Other engines' frameworks are named as such; native still runs. */
  p = tmp_file("maxtext.yaml", "modules:\n  pre_trainer:\n    framework: maxtext\n    model: llama3_8B\n");
  load_fails(p, NULL, 0, PRM_ECONFIG, "maxtext.yaml:3: framework: primus runs \"megatron\" and \"native\"");
  free(p);
  p = write_exp("native.yaml", "qwen2.5_7B", NULL); /* a megatron preset from a native experiment */
  e = load_ok(p, NULL, 0);
  assert_string_equal(prm_exp_framework(e), "native");
  assert_int_equal(prm_exp_get_bool(e, "add_qkv_bias", &on), 0);
  assert_true(on);
  prm_exp_free(e);
  free(p);
}

static void test_unsupported_models(void **state) {
  (void)state;
  static const struct {
    const char *model, *feature;
  } cases[] = {
      {"deepseek_v3.yaml", "multi-latent attention (MLA)"},
      {"deepseek_v2_lite", "multi-latent attention (MLA)"},
      {"llama4_17B16E", "Llama 4"},
      {"gpt_oss_20B", "attention sinks"},
      {"grok1", "Grok"},
      {"mamba_370M", "Mamba"},
      {"zebra_llama_1B", "hybrid"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *p = write_megatron("arch.yaml", cases[i].model, NULL);
    char *want = prm_xasprintf("arch.yaml:12: model preset \"%s\": ", cases[i].model);
    load_fails(p, NULL, 0, PRM_ECONFIG, want);
    load_fails(p, NULL, 0, PRM_ECONFIG, cases[i].feature);
    load_fails(p, NULL, 0, PRM_ECONFIG, "not implemented in primus' engine");
    free(want);
    free(p);
  }
  /* A name primus simply does not ship stays "not found". */
  char *p = write_megatron("nf.yaml", "llama3_9B", NULL);
  load_fails(p, NULL, 0, PRM_ENOENT, "model preset \"llama3_9B\" not found");
  free(p);
}

static void test_hf_cache(void **state) {
  (void)state;
  assert_true(prm_hf_is_model_id("meta-llama/Meta-Llama-3-8B"));
  assert_true(prm_hf_is_model_id("Qwen/Qwen2.5-7B"));
  assert_false(prm_hf_is_model_id("/abs/path"));
  assert_false(prm_hf_is_model_id("./rel/x"));
  assert_false(prm_hf_is_model_id("a/b/c"));
  assert_false(prm_hf_is_model_id("plain"));
  assert_false(prm_hf_is_model_id("a/../b"));
  char *hf = prm_path_join(prm_test_tmpdir(), "hfhome");
  char *old_hub = getenv("HF_HUB_CACHE") ? prm_xstrdup(getenv("HF_HUB_CACHE")) : NULL;
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", hf, 1);
  char buf[4096], want[4096];
  snprintf(want, sizeof want, "%s/hub", hf);
  assert_string_equal(prm_hf_cache_dir(buf, sizeof buf), want);
  /* Not cached: not found, nothing fetched. */
  assert_int_equal(prm_hf_cache_resolve("meta-llama/Meta-Llama-3-8B", buf, sizeof buf), PRM_ENOENT);
  /* Two snapshots; refs/main names the one to use. */
  char *a = prm_xasprintf("%s/hub/models--meta-llama--Meta-Llama-3-8B/snapshots/aaa/tokenizer.json", hf);
  char *b = prm_xasprintf("%s/hub/models--meta-llama--Meta-Llama-3-8B/snapshots/bbb/tokenizer.json", hf);
  free(prm_test_write("/", a, "{}"));
  free(prm_test_write("/", b, "{}"));
  free(prm_test_write(hf, "hub/models--meta-llama--Meta-Llama-3-8B/refs/main", "bbb\n"));
  assert_int_equal(prm_hf_cache_resolve("meta-llama/Meta-Llama-3-8B", buf, sizeof buf), 0);
  assert_true(prm_endswith(buf, "models--meta-llama--Meta-Llama-3-8B/snapshots/bbb"));
  /* A snapshot without tokenizer files does not count. */
  free(prm_test_write(hf, "hub/models--Qwen--Qwen3-8B/snapshots/ccc/config.json", "{}"));
  assert_int_equal(prm_hf_cache_resolve("Qwen/Qwen3-8B", buf, sizeof buf), PRM_ENOENT);
  unsetenv("HF_HOME");
  if (old_hub) setenv("HF_HUB_CACHE", old_hub, 1);
  free(old_hub);
  free(a);
  free(b);
  free(hf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_yaml_parse),       cmocka_unit_test(test_yaml_malformed),
      cmocka_unit_test(test_yaml_emit),        cmocka_unit_test(test_node_ops),
      cmocka_unit_test(test_env_expand),       cmocka_unit_test(test_extends),
      cmocka_unit_test(test_vars),             cmocka_unit_test(test_precedence),
      cmocka_unit_test(test_unknown_keys),     cmocka_unit_test(test_types_and_ranges),
      cmocka_unit_test(test_missing_file),     cmocka_unit_test(test_fixtures),     cmocka_unit_test(test_shipped_presets),
      cmocka_unit_test(test_params),           cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_megatron_presets), cmocka_unit_test(test_megatron_keys),
      cmocka_unit_test(test_unsupported_models), cmocka_unit_test(test_hf_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
