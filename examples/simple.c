/* The smallest program on libpowerinfer: greedy generation.
 *   simple MODEL PROMPT N_TOKENS
 * prints only the generated text (then a newline), as `powerinfer run -m MODEL -p PROMPT -n N
 * --temp 0 --no-display-prompt` does, and the decode rate on stderr; errors go to stderr with
 * exit code 1. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "powerinfer/powerinfer.h"

static bool print_text(const char* text, size_t n, void* user) {
  (void)user;
  fwrite(text, 1, n, stdout);
  fflush(stdout);
  return true;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL PROMPT N_TOKENS\n", argv[0]);
    return 1;
  }
  const int n_predict = atoi(argv[3]);
  pi_engine* engine = NULL;
  if (pi_engine_load(argv[1], NULL, &engine) != PI_OK) {
    fprintf(stderr, "error: %s\n", pi_engine_error(engine));
    pi_engine_free(engine);
    return 1;
  }
  pi_session_options so = pi_session_options_default();
  so.sampling.temperature = 0.0f; /* greedy */
  pi_session* session = NULL;
  int rc = 1;
  if (pi_session_create(engine, &so, &session) != PI_OK) {
    fprintf(stderr, "error: %s\n", pi_session_error(session));
    goto done;
  }
  int32_t n = pi_tokenize(engine, argv[2], -1, pi_add_bos(engine), true, NULL, 0);
  if (n < 0) {
    fprintf(stderr, "error: %s has no vocabulary\n", argv[1]);
    goto done;
  }
  int32_t* tokens = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  if (tokens == NULL) goto done;
  pi_tokenize(engine, argv[2], -1, pi_add_bos(engine), true, tokens, n);
  pi_status st = pi_session_prompt(session, tokens, (size_t)n);
  /* The engine's generation loop: end tokens, whole UTF-8 characters, the prompt as context
   * (a first word keeps its space). */
  pi_generate_params gp = pi_generate_params_default();
  gp.max_tokens = n_predict;
  gp.context = tokens;
  gp.n_context = (size_t)n;
  if (st == PI_OK) st = pi_session_generate(session, &gp, print_text, NULL, NULL);
  free(tokens);
  if (st != PI_OK) {
    fprintf(stderr, "\nerror: %s\n", pi_session_error(session));
    goto done;
  }
  fputc('\n', stdout);
  pi_timings t;
  if (pi_session_timings(session, &t) == PI_OK && t.n_eval > 0 && t.eval_ms > 0)
    fprintf(stderr, "eval: %lld tokens, %.2f tokens per second\n", (long long)t.n_eval,
            1e3 * (double)t.n_eval / t.eval_ms);
  rc = 0;
done:
  pi_session_free(session);
  pi_engine_free(engine);
  return rc;
}
