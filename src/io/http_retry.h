// Retries with exponential backoff for the Hub's upload calls, as huggingface_hub's http_backoff does: a 429 or 5xx
// answer and a broken or refused connection are tried again after 1, 2, 4, 8 s; anything else is the answer.
#pragma once

#include <string>

#include "io/hub_http.h"

namespace vitpipe {

struct RetryPolicy {
  int attempts = 5;
  double first_wait_seconds = 1;
  double max_wait_seconds = 8;
};

bool is_transient_status(long status);  // 429, 500, 502, 503, 504

// `what` names the call in the warnings ("uploading model.safetensors"). Returns the last answer (which may still be
// a 5xx after the last attempt); a connection that keeps failing throws HttpTransferError.
HttpResponse http_request_with_retries(const HttpRequest& request, const std::string& what,
                                       const RetryPolicy& policy = {});

}  // namespace vitpipe
