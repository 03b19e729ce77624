// The Jinja subset's parser (jinja.h): a template's source to the tree of nodes jinja_eval.h
// renders, with Jinja's whitespace control. Internal to runtime/chat.
#pragma once
#include <string>

#include "runtime/chat/jinja_eval.h"

namespace troupe::chat::jinja {

// Throws template_error "line N: what" on a syntax error.
body parse_template(const std::string& source);

}  // namespace troupe::chat::jinja
