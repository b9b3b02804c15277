/* test-bench.c - the result-table writer in every format, parsed back
 * (CSV by an RFC 4180 reader, TSV by field counts, JSON Lines and JSON by
 * cJSON, Markdown by its column bars), and the measurements' structure and
 * sanity: positive, finite figures, backend names, errors for bad shapes.
 * Never a speed: the machine is shared. */
#define _GNU_SOURCE
#include "testlib.h"
#include "primus/prm_bench.h"
#include "primus/prm_kernels.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Table writer                                                              */
/* ------------------------------------------------------------------------ */

static const char *const cols[] = {"name", "ms", "iters"};
/* Text that needs quoting in CSV and escaping in JSON and Markdown. */
static const char *const names[] = {"plain", "comma, \"quoted\"", "two\nlines | bar"};

static prm_table_t *sample(void) {
  prm_table_t *t = prm_table_new(3, cols);
  for (int i = 0; i < 3; i++) {
    prm_table_row(t);
    prm_table_str(t, names[i]);
    prm_table_num(t, 1.5 * (i + 1), 3);
    prm_table_int(t, 10 * (i + 1));
  }
  return t;
}

static char *write_fmt(const prm_table_t *t, const char *file) {
  prm_err_t err = {0};
  char *path = prm_path_join(prm_test_tmpdir(), file);
  assert_int_equal(prm_table_write(t, path, "a title", &err), 0);
  char *text = prm_test_read(path);
  free(path);
  return text;
}

/* A small RFC 4180 reader: records of fields, quotes doubled inside quoted
 * fields. Returns the number of records; fields[r][c] are newly allocated. */
static int csv_parse(const char *s, char *fields[8][8], int *nf) {
  int r = 0, c = 0;
  prm_sb_t f = {0};
  while (*s && r < 8) {
    prm_sb_reset(&f);
    prm_sb_append(&f, "");
    if (*s == '"') {
      for (s++; *s; s++) {
        if (*s == '"' && s[1] == '"') prm_sb_putc(&f, '"'), s++;
        else if (*s == '"') { s++; break; }
        else prm_sb_putc(&f, *s);
      }
    } else {
      while (*s && *s != ',' && *s != '\n') prm_sb_putc(&f, *s++);
    }
    assert_true(c < 8);
    fields[r][c++] = prm_sb_steal(&f);
    if (*s == ',') { s++; continue; }
    assert_true(*s == '\n' || !*s);
    if (*s) s++;
    nf[r++] = c;
    c = 0;
  }
  prm_sb_free(&f);
  return r;
}

static void test_csv(void **state) {
  (void)state;
  prm_table_t *t = sample();
  char *text = write_fmt(t, "r.csv");
  char *f[8][8] = {{0}};
  int nf[8] = {0};
  int n = csv_parse(text, f, nf);
  assert_int_equal(n, 4);
  for (int r = 0; r < n; r++) assert_int_equal(nf[r], 3);
  assert_string_equal(f[0][0], "name");
  assert_string_equal(f[0][2], "iters");
  for (int i = 0; i < 3; i++) assert_string_equal(f[i + 1][0], names[i]);
  assert_string_equal(f[2][1], "3.000");
  assert_string_equal(f[3][2], "30");
  for (int r = 0; r < n; r++)
    for (int c = 0; c < nf[r]; c++) free(f[r][c]);
  free(text);
  prm_table_free(t);
}

static void test_tsv(void **state) {
  (void)state;
  prm_table_t *t = sample();
  char *text = write_fmt(t, "r.tsv");
  int lines = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    int tabs = 0;
    for (char *p = l; *p; p++) tabs += *p == '\t';
    assert_int_equal(tabs, 2);
    if (lines == 0) assert_string_equal(l, "name\tms\titers");
    lines++;
  }
  assert_int_equal(lines, 4); /* the line break inside a field became a space */
  free(text);
  prm_table_free(t);
}

static void check_row(const cJSON *o, int i) {
  assert_true(cJSON_IsObject(o));
  assert_int_equal(cJSON_GetArraySize(o), 3);
  const cJSON *name = cJSON_GetObjectItem(o, "name"), *ms = cJSON_GetObjectItem(o, "ms"),
              *it = cJSON_GetObjectItem(o, "iters");
  assert_true(cJSON_IsString(name));
  assert_string_equal(name->valuestring, names[i]);
  assert_true(cJSON_IsNumber(ms) && cJSON_IsNumber(it));
  assert_true(fabs(ms->valuedouble - 1.5 * (i + 1)) < 1e-9);
  assert_int_equal((int)it->valuedouble, 10 * (i + 1));
}

static void test_jsonl(void **state) {
  (void)state;
  prm_table_t *t = sample();
  char *text = write_fmt(t, "r.jsonl");
  int i = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    cJSON *o = cJSON_Parse(l);
    assert_non_null(o);
    check_row(o, i++);
    cJSON_Delete(o);
  }
  assert_int_equal(i, 3);
  free(text);
  prm_table_free(t);
}

static void test_json(void **state) {
  (void)state;
  prm_table_t *t = sample();
  char *text = write_fmt(t, "r.JSON"); /* extensions are case-insensitive */
  cJSON *a = cJSON_Parse(text);
  assert_true(cJSON_IsArray(a));
  assert_int_equal(cJSON_GetArraySize(a), 3);
  for (int i = 0; i < 3; i++) check_row(cJSON_GetArrayItem(a, i), i);
  cJSON_Delete(a);
  free(text);
  prm_table_free(t);

  /* Non-finite numbers and cells a row left empty are null; an empty table
   * is an empty array. */
  t = prm_table_new(3, cols);
  prm_table_row(t);
  prm_table_str(t, "x");
  prm_table_num(t, NAN, 2);
  text = write_fmt(t, "nan.json");
  a = cJSON_Parse(text);
  assert_non_null(a);
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "ms")));
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "iters")));
  assert_null(prm_table_cell(t, 0, 2));
  assert_string_equal(prm_table_cell(t, 0, 1), "nan");
  cJSON_Delete(a);
  free(text);
  prm_table_free(t);
  t = prm_table_new(3, cols);
  text = write_fmt(t, "empty.json");
  a = cJSON_Parse(text);
  assert_true(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 0);
  cJSON_Delete(a);
  free(text);
  prm_table_free(t);
}

static void test_markdown(void **state) {
  (void)state;
  prm_table_t *t = sample();
  for (int k = 0; k < 2; k++) {
    char *text = write_fmt(t, k ? "noext" : "r.md"); /* no extension: Markdown */
    assert_true(prm_startswith(text, "## a title\n\n"));
    int lines = 0;
    size_t width = 0;
    for (char *save = NULL, *l = strtok_r(text + 12, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
      /* Every line is a row of four bars (an escaped one aside), all the
       * same width: the columns are aligned. */
      int bars = 0;
      for (char *p = l; *p; p++) bars += *p == '|' && (p == l || p[-1] != '\\');
      assert_int_equal(bars, 4);
      if (!width) width = strlen(l);
      assert_int_equal(strlen(l), width);
      if (lines == 1) assert_non_null(strstr(l, "-:|")); /* numbers right-aligned */
      lines++;
    }
    assert_int_equal(lines, 5);
    free(text);
  }
  prm_table_free(t);
}

static void test_bad_extension(void **state) {
  (void)state;
  prm_table_t *t = sample();
  prm_err_t err = {0};
  char *path = prm_path_join(prm_test_tmpdir(), "r.xlsx");
  assert_int_equal(prm_table_write(t, path, NULL, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, ".xlsx"));
  assert_false(prm_fs_exists(path));
  assert_null(prm_table_format_of("", &err));
  assert_string_equal(prm_table_format_of("-", NULL), "md");
  assert_string_equal(prm_table_format_of("dir.v2/out.tsv", NULL), "tsv");
  assert_string_equal(prm_table_format_of("dir.v2/out", NULL), "md");
  prm_sb_t sb = {0};
  assert_int_equal(prm_table_render(t, "xml", NULL, &sb, &err), PRM_EINVAL);
  prm_sb_free(&sb);
  free(path);
  prm_table_free(t);
}

/* ------------------------------------------------------------------------ */
/* Measurements                                                              */
/* ------------------------------------------------------------------------ */

#define FINITE_POS(x) assert_true(isfinite(x) && (x) > 0)

static void test_gemm(void **state) {
  (void)state;
  const char *names_[8];
  int nb = prm_bench_gemm_backends(names_, 8);
  assert_true(nb >= 1);
  assert_string_equal(names_[nb - 1], "reference");
  prm_err_t err = {0};
  for (int i = 0; i < nb; i++)
    for (int tr = 0; tr < 4; tr++) {
      prm_bench_gemm_opts_t o = {.m = 24, .n = 40, .k = 16, .trans_a = tr & 1,
                                 .trans_b = tr >> 1, .backend = names_[i], .duration_s = 0.005};
      prm_bench_gemm_result_t r;
      assert_int_equal(prm_bench_gemm(&o, &r, &err), 0);
      assert_string_equal(r.backend, names_[i]);
      assert_true(r.iters >= 1);
      FINITE_POS(r.ms_avg);
      FINITE_POS(r.tflops);
      FINITE_POS(r.gbs);
      assert_true(r.ms_min <= r.ms_avg * 1.0000001);
      assert_true(fabs(r.intensity - 2.0 * 24 * 40 * 16 / (4.0 * (24 * 16 + 16 * 40 + 24 * 40))) < 1e-9);
      assert_true(isfinite(r.peak_fraction) && r.peak_fraction >= 0);
    }
  /* NULL and the old name "native" are accepted too; rows say "reference". */
  prm_bench_gemm_opts_t o = {.m = 8, .n = 8, .k = 8, .duration_s = 0};
  prm_bench_gemm_result_t r;
  assert_int_equal(prm_bench_gemm(&o, &r, &err), 0);
  assert_string_equal(r.backend, names_[0]);
  o.backend = "native";
  assert_int_equal(prm_bench_gemm(&o, &r, &err), 0);
  assert_string_equal(r.backend, "reference");
}

/* The GPUs' data-sheet peaks by the names the driver reports. */
static void test_dev_spec(void **state) {
  (void)state;
  prm_bench_dev_peak_t p;
  assert_int_equal(prm_bench_dev_spec("NVIDIA H100 80GB HBM3", &p), 1);
  assert_true(p.bf16_tflops == 989.4 && p.fp32_tflops == 66.9 && p.mem_tbs == 3.35);
  assert_non_null(strstr(p.source, "H100 SXM"));
  assert_int_equal(prm_bench_dev_spec("NVIDIA H100 PCIe", &p), 1);
  assert_true(p.bf16_tflops == 756.5 && p.mem_tbs == 2.0);
  assert_int_equal(prm_bench_dev_spec("NVIDIA H100 NVL", &p), 1);
  assert_true(p.mem_tbs == 3.9);
  assert_int_equal(prm_bench_dev_spec("NVIDIA H200", &p), 1);
  assert_true(p.bf16_tflops == 989.4 && p.mem_tbs == 4.8);
  assert_int_equal(prm_bench_dev_spec("NVIDIA A100-SXM4-40GB", &p), 1);
  assert_true(p.bf16_tflops == 312.0 && p.mem_tbs == 1.555);
  assert_int_equal(prm_bench_dev_spec("NVIDIA A100-SXM4-80GB", &p), 1);
  assert_true(p.mem_tbs == 2.039);
  assert_int_equal(prm_bench_dev_spec("NVIDIA GeForce RTX 4090", &p), 0);
  assert_true(p.bf16_tflops == 0 && p.fp32_tflops == 0 && p.mem_tbs == 0);
  assert_int_equal(prm_bench_dev_spec(NULL, &p), 0);
  /* bf16 falls back to fp32 where there is no bf16 figure. */
  prm_bench_dev_peak_t q = {.bf16_tflops = 0, .fp32_tflops = 2.5};
  assert_true(prm_bench_dev_peak_for(&q, 1) == 2.5);
  q.bf16_tflops = 7;
  assert_true(prm_bench_dev_peak_for(&q, 1) == 7 && prm_bench_dev_peak_for(&q, 0) == 2.5);
  /* Opening: an unknown name is the device key's error; cuda without a
   * GPU names what is missing (exit 2). */
  prm_dev_t *d = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_bench_dev_open("tpu", 0, &d, &err), PRM_ECONFIG);
  assert_null(d);
  assert_int_equal(prm_bench_dev_open("cpu", 0, &d, &err), 0);
  assert_int_equal(d->kind, PRM_DEV_KIND_CPU);
  prm_bench_dev_peak(d, &p);
  assert_true(p.fp32_tflops > 0);
  prm_dev_close(d);
}

static void test_gemm_errors(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_bench_gemm_result_t r;
  prm_bench_gemm_opts_t o = {.m = 0, .n = 8, .k = 8};
  assert_int_equal(prm_bench_gemm(&o, &r, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "M, N and K"));
  o = (prm_bench_gemm_opts_t){.m = 8, .n = 8, .k = -3};
  assert_int_equal(prm_bench_gemm(&o, &r, &err), PRM_EINVAL);
  o = (prm_bench_gemm_opts_t){.m = 8, .n = 8, .k = 8, .trans_a = 2};
  assert_int_equal(prm_bench_gemm(&o, &r, &err), PRM_EINVAL);
  o = (prm_bench_gemm_opts_t){.m = 8, .n = 8, .k = 8, .backend = "cublas"};
  assert_int_equal(prm_bench_gemm(&o, &r, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "cublas"));
  assert_non_null(strstr(err.msg, "reference"));
  assert_null(strstr(err.msg, "native"));
  /* bf16 runs (bf16 operands, fp32 accumulation) and reports its
   * conversion time separately. */
  o = (prm_bench_gemm_opts_t){.m = 8, .n = 8, .k = 8, .bf16 = 1, .duration_s = 0.01};
  assert_int_equal(prm_bench_gemm(&o, &r, &err), 0);
  assert_true(r.tflops > 0);
  assert_true(r.cvt_ms >= 0);
}

static void test_dense_gemms(void **state) {
  (void)state;
  prm_bench_dense_gemm_t g[16];
  /* Llama 3 8B shapes, 2 x 128 tokens. */
  int n = prm_bench_dense_gemms(4096, 32, 8, 14336, 128256, 256, g);
  assert_int_equal(n, 15);
  assert_string_equal(g[0].name, "attn_qkv");
  assert_string_equal(g[0].phase, "fwd");
  assert_true(g[0].m == 256 && g[0].n == 6144 && g[0].k == 4096 && g[0].trans_b == 1);
  assert_string_equal(g[1].phase, "dgrad");
  assert_true(g[1].m == 256 && g[1].n == 4096 && g[1].k == 6144 && !g[1].trans_a && !g[1].trans_b);
  assert_string_equal(g[2].phase, "wgrad");
  assert_true(g[2].m == 6144 && g[2].n == 4096 && g[2].k == 256 && g[2].trans_a == 1);
  assert_string_equal(g[6].name, "mlp_gate_up");
  assert_int_equal(g[6].n, 2 * 14336);
  assert_string_equal(g[9].name, "mlp_down");
  assert_int_equal(g[9].k, 14336);
  assert_string_equal(g[12].name, "lm_head");
  assert_int_equal(g[12].n, 128256);
  /* Every one runs through the benchmark (small shapes). */
  n = prm_bench_dense_gemms(16, 4, 2, 24, 40, 8, g);
  prm_err_t err = {0};
  for (int i = 0; i < n; i++) {
    prm_bench_gemm_opts_t o = {.m = g[i].m, .n = g[i].n, .k = g[i].k, .trans_a = g[i].trans_a,
                               .trans_b = g[i].trans_b};
    prm_bench_gemm_result_t r;
    assert_int_equal(prm_bench_gemm(&o, &r, &err), 0);
    FINITE_POS(r.tflops);
  }
}

static void test_attention(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_bench_attn_opts_t o = {.batch = 2, .seq = 16, .heads = 4, .kv_heads = 2, .head_dim = 8,
                             .duration_s = 0.01};
  prm_bench_attn_result_t r;
  assert_int_equal(prm_bench_attention(&o, &r, &err), 0);
  FINITE_POS(r.fwd_ms);
  FINITE_POS(r.bwd_ms);
  FINITE_POS(r.fwd_tflops);
  FINITE_POS(r.bwd_tflops);
  assert_true(r.fwd_iters >= 1 && r.bwd_iters >= 1);
  o.kv_heads = 3;
  assert_int_equal(prm_bench_attention(&o, &r, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "kv_heads"));
  o.kv_heads = 2;
  o.seq = 0;
  assert_int_equal(prm_bench_attention(&o, &r, &err), PRM_EINVAL);
}

static void test_node(void **state) {
  (void)state;
  FINITE_POS(prm_bench_triad(1 << 20, 0.01));
  assert_true(prm_bench_triad(0, 0.01) == 0);
  double omp_us, pool_us;
  prm_bench_dispatch(0.02, &omp_us, &pool_us);
  FINITE_POS(omp_us);
  FINITE_POS(pool_us);

  prm_err_t err = {0};
  double w, r;
  assert_int_equal(prm_bench_disk(prm_test_tmpdir(), 1 << 20, &w, &r, &err), 0);
  FINITE_POS(w);
  FINITE_POS(r);
  prm_argv_t left = {0};
  assert_int_equal(prm_fs_list_dir(prm_test_tmpdir(), &left, &err), 0);
  for (int i = 0; i < left.n; i++) assert_false(prm_startswith(left.v[i], ".primus-bench"));
  prm_argv_free(&left);
  assert_int_equal(prm_bench_disk("/nonexistent/dir", 1 << 20, &w, &r, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "/nonexistent/dir"));
  assert_int_equal(prm_bench_disk(prm_test_tmpdir(), 0, &w, &r, &err), PRM_EINVAL);

  size_t actual = 0;
  assert_int_equal(prm_bench_ckpt(prm_test_tmpdir(), 1 << 20, &w, &r, &actual, &err), 0);
  FINITE_POS(w);
  FINITE_POS(r);
  assert_true(actual > 0);
  assert_int_equal(prm_fs_list_dir(prm_test_tmpdir(), &left, &err), 0);
  for (int i = 0; i < left.n; i++) assert_false(prm_startswith(left.v[i], ".primus-bench"));
  prm_argv_free(&left);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_csv),          cmocka_unit_test(test_tsv),
      cmocka_unit_test(test_jsonl),        cmocka_unit_test(test_json),
      cmocka_unit_test(test_markdown),     cmocka_unit_test(test_bad_extension),
      cmocka_unit_test(test_gemm),         cmocka_unit_test(test_gemm_errors),
      cmocka_unit_test(test_dev_spec),
      cmocka_unit_test(test_dense_gemms),  cmocka_unit_test(test_attention),
      cmocka_unit_test(test_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
