/* The smallest program on libpowerinfer: greedy generation.
 *   simple MODEL PROMPT N_TOKENS
 * prints only the generated text (then a newline), as `powerinfer run -m MODEL -p PROMPT -n N
 * --temp 0 --no-display-prompt` does, and the decode rate on stderr; errors go to stderr with
 * exit code 1. */
#include <stdio.h>
#include <stdlib.h>

#include "powerinfer/powerinfer.h"

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
  free(tokens);
  if (st != PI_OK) {
    fprintf(stderr, "error: %s\n", pi_session_error(session));
    goto done;
  }
  char piece[256];
  for (int i = 0; i < n_predict; ++i) {
    const int32_t t = pi_session_sample(session);
    if (pi_token_is_eog(engine, t)) break;
    const int32_t len = pi_token_piece(engine, t, piece, (int32_t)sizeof piece);
    if (len > (int32_t)sizeof piece) { /* a long piece: ask again with room for it */
      char* big = malloc((size_t)len);
      if (big == NULL) goto done;
      pi_token_piece(engine, t, big, len);
      fwrite(big, 1, (size_t)len, stdout);
      free(big);
    } else if (len > 0) {
      fwrite(piece, 1, (size_t)len, stdout);
    }
    if (pi_session_advance(session, t) != PI_OK) {
      fprintf(stderr, "\nerror: %s\n", pi_session_error(session));
      goto done;
    }
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
