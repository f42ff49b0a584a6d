#!/usr/bin/env bash
# The main job: installs what is missing, builds, then shows sandgate deciding real requests
# of a coding agent against the shipped example policy. (When the launcher lands, this runs
# a sandboxed command through the embedded proxy instead.)
set -euo pipefail
cd "$(dirname "$0")/.."
SANDGATE_TARGETS=sandgate ./scripts/build.sh >/dev/null
sg=${SANDGATE_BUILD_DIR:-build}/cli/sandgate
config=config/examples/coding-agent.yaml

say() { printf '\n== %s\n' "$*"; }
say "Validate the example policy ($config)"
"$sg" policy lint "$config"

say "The agent may install npm packages:"
"$sg" policy check --config "$config" --task agent registry.npmjs.org:443 || true
say "It may call the LLM API (TLS intercepted, key injected by sandgate, never seen by the agent):"
"$sg" policy check --config "$config" --task agent --method POST \
  https://api.openai.com/v1/chat/completions || true
say "It may not push to GitHub (only clone/fetch is allowed):"
"$sg" policy check --config "$config" --task agent --method POST \
  https://github.com/org/repo.git/git-receive-pack || true
say "Gists are denied explicitly, even though *.githubusercontent.com is allowed:"
"$sg" policy check --config "$config" --task agent gist.githubusercontent.com:443 || true
say "Anything not on the policy is refused (default deny):"
"$sg" policy check --config "$config" --task agent pastebin.com:443 || true
say "IP literals in internal ranges are refused, whatever their spelling (here: 127.0.0.1):"
"$sg" policy check --config "$config" --task agent 2130706433:443 || true
say "The policy's own test suite:"
"$sg" policy test config/examples/coding-agent.tests.yaml
