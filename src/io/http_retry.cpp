#include "io/http_retry.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "util/log.h"

namespace vitpipe {

bool is_transient_status(long status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

HttpResponse http_request_with_retries(const HttpRequest& request, const std::string& what, const RetryPolicy& policy) {
  double wait = policy.first_wait_seconds;
  for (int attempt = 1;; ++attempt) {
    const bool last = attempt >= policy.attempts;
    std::string reason;
    try {
      HttpResponse response = http_request(request);
      if (!is_transient_status(response.status) || last) return response;
      reason = concat("HTTP ", response.status, " from ", url_origin(response.url));
    } catch (const HttpTransferError& e) {
      if (!e.retryable() || last) throw;
      reason = e.what();
    }
    warn(what, ": ", reason, "; attempt ", attempt + 1, " of ", policy.attempts, " in ", wait, " s");
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    wait = std::min(wait * 2, policy.max_wait_seconds);
  }
}

}  // namespace vitpipe
