// `serve`'s try-it page (GET /): src/serve/try_page.html, compiled into the binary at build time
// (cmake/embed_file.cmake), so the page needs no file, CDN or network at run time. It uses only the HTTP API:
// GET /v1/model (labels, card summary, operating points) and POST /v1/predict (probabilities, heatmaps).
#pragma once

#include <string_view>

namespace vitpipe {

std::string_view try_page_html();

}  // namespace vitpipe
