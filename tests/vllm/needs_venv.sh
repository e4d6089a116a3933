# Sourced by tests/vllm/run.sh and tests/vllm_engine/run.sh: needs_venv DIR FLAG exits 77
# (skipped, saying why) unless DIR's python has vLLM and pytest (tools/deps.sh FLAG makes DIR)
# and the binding is built; else sets py to DIR's python.
needs_venv() {
	py=$1/bin/python
	if [ ! -x "$py" ] || ! "$py" -c 'import importlib.util as u, sys
sys.exit(not (u.find_spec("vllm") and u.find_spec("pytest")))' 2>/dev/null; then
		echo "skipped: $1 lacks vLLM or pytest (tools/deps.sh $2 makes it)"
		exit 77
	fi
	if [ ! -e lib/python/kvpool/_kvpool.abi3.so ]; then
		echo "skipped: the binding is not built (no Python.h: apt-get install python3-dev)"
		exit 77
	fi
}
