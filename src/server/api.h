/* server/api: the APIs' request parsing and answers (openai.c, anthropic.c), for http.c and the
 * worker (through srv.h's srv_stream_* and srv_answer_json, which pick the API's). */
#ifndef GM_SERVER_API_H
#define GM_SERVER_API_H

#include "srv.h"

/* Request fields: each returns false after failing j with a 400 that names the field. */
bool srv_req_number(srv_job *j, json_t *req, const char *key, double lo, double hi, double *out);
bool srv_req_uint(srv_job *j, json_t *req, const char *key, uint64_t lo, uint64_t hi, uint64_t *out, bool *set);
bool srv_req_bool(srv_job *j, json_t *req, const char *key, bool *out);
bool srv_req_stops(srv_job *j, json_t *v, const char *key);
bool srv_req_model(srv_pool *p, srv_job *j, json_t *req);
bool srv_req_sampling(srv_job *j, json_t *req, double temp_hi);
bool srv_check_tools(srv_job *j, json_t *tools);
void srv_job_id(srv_job *j, const char *prefix);
/* OpenAI messages as the templates take them (text parts joined, tool-call arguments as objects). */
json_t *srv_openai_messages(srv_job *j, json_t *msgs);

/* Each fills j (model, prompt tokens, sampling, ...) or fails it. */
bool srv_openai_parse_chat(srv_pool *p, json_t *req, srv_job *j);
bool srv_openai_parse_completion(srv_pool *p, json_t *req, srv_job *j);
/* count_only: only the prompt (for /v1/messages/count_tokens). */
bool srv_anthropic_parse(srv_pool *p, json_t *req, srv_job *j, bool count_only);

char *srv_openai_answer(srv_job *j);
void srv_openai_stream_begin(srv_job *j);
void srv_openai_stream_delta(srv_job *j, bool reasoning, const char *text, size_t len);
void srv_openai_stream_end(srv_job *j);
void srv_openai_stream_error(srv_job *j);

char *srv_anthropic_answer(srv_job *j);
void srv_anthropic_stream_begin(srv_job *j);
void srv_anthropic_stream_delta(srv_job *j, bool reasoning, const char *text, size_t len);
void srv_anthropic_stream_end(srv_job *j);
void srv_anthropic_stream_error(srv_job *j);
/* The error of a failed stream, as its last events. */
void srv_stream_error(srv_job *j);

#endif
