#!/usr/bin/env bash
# make test: runs make test's steps (the Makefile's TEST_STEPS), each as its
# own make goal, in order, and stops at the first that fails, as make does
# with prerequisites. Each step prints a line when it starts (wall clock,
# UTC) and one with its time when it ends, and the run ends with every
# step's time and, for lab-test, each package's and each test that took a
# minute or more (from go test -v), so that a CI log shows where the time
# went.
#
# Usage: MAKE=make steps.sh STEP...
# `build` is made once, as a step; the later steps that name it as a
# prerequisite (lint, deploy-test, kdb-quick, demo-smoke) do not make it
# again (make -o build).
#
# A STEP of goals joined by + (unit-test+deploy-test) makes them at the
# same time, each as its own goal: for steps that spend most of their
# time waiting (deploy-test waits on Prometheus' scrapes and rules: 21 s
# of CPU in 96 s here), so that another step's work fills the CPUs
# meanwhile. Each one's output is printed whole when it ends, with its
# own time; the group fails if any of them does, after all have ended.
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$(date +%s)
names=()
secs=()
notes=()
built=

clock() { date -u +%T; }

# summary prints the time of each step that ran, the lab tests' packages
# and their tests of a minute or more.
summary() {
	local i
	echo "== make test: step times"
	for i in "${!names[@]}"; do
		printf '  %-18s %6d s%s\n' "${names[$i]}" "${secs[$i]}" "${notes[$i]:+  ${notes[$i]}}"
	done
	printf '  %-18s %6d s\n' total "$(($(date +%s) - start))"
	if [ -s "$logs/lab-test" ]; then
		echo "== make test: lab-test by package (go test), then its tests of 60 s or more"
		# "ok  	PKG	12.3s" / "FAIL	PKG	12.3s"
		awk '$1 == "ok" || ($1 == "FAIL" && NF >= 3) { sub(/^github.com\/fspair\/fspair\//, "", $2); printf "  %-4s %-28s %s\n", $1, $2, $3 }' "$logs/lab-test"
		# "--- PASS: TestX (123.45s)", top-level tests only
		awk '/^--- (PASS|FAIL): / { t = $4; gsub(/[()s]/, "", t); sub(/:$/, "", $2); if (t + 0 >= 60) printf "  %-4s %-40s %6.0f s\n", $2, $3, t }' "$logs/lab-test"
	fi
}

# together makes the goals of a STEP joined by + at the same time (see
# above) and returns the first failing goal's status, or 0.
together() {
	local goal g status rc=0 done_pid others
	local -A goal_of=() began=()
	for goal in "$@"; do
		"$make" "${flags[@]}" "$goal" >"$logs/$goal" 2>&1 &
		goal_of[$!]=$goal
		began[$goal]=$(date +%s)
	done
	while [ "${#goal_of[@]}" -gt 0 ]; do
		status=0
		wait -n -p done_pid "${!goal_of[@]}" || status=$?
		goal=${goal_of[$done_pid]}
		unset "goal_of[$done_pid]"
		cat "$logs/$goal"
		names+=("$goal")
		secs+=("$(($(date +%s) - ${began[$goal]}))")
		others=()
		for g in "$@"; do
			[ "$g" != "$goal" ] && others+=("$g")
		done
		notes+=("at the same time as ${others[*]}")
		if [ "$status" != 0 ]; then
			echo "== make test: [$(clock)] $goal FAILED after ${secs[-1]} s"
			[ "$rc" = 0 ] && rc=$status
		else
			echo "== make test: [$(clock)] $goal passed in ${secs[-1]} s"
		fi
	done
	return "$rc"
}

n=0
for step in "$@"; do
	n=$((n + 1))
	flags=(--no-print-directory)
	[ -n "$built" ] && flags+=(-o build)
	if [[ $step == *+* ]]; then
		IFS=+ read -ra goals <<<"$step"
		echo "== make test: [$(clock)] ${goals[*]}, at the same time (step $n of $#; each one's output when it ends)"
		rc=0
		together "${goals[@]}" || rc=$?
		if [ "$rc" != 0 ]; then
			summary
			exit "$rc"
		fi
		continue
	fi
	echo "== make test: [$(clock)] $step (step $n of $#)"
	s=$(date +%s)
	"$make" "${flags[@]}" "$step" 2>&1 | tee "$logs/$step"
	rc=${PIPESTATUS[0]}
	names+=("$step")
	secs+=("$(($(date +%s) - s))")
	notes+=("")
	[ "$step" = build ] && [ "$rc" = 0 ] && built=1
	if [ "$rc" != 0 ]; then
		echo "== make test: [$(clock)] $step FAILED after ${secs[-1]} s"
		summary
		exit "$rc"
	fi
	echo "== make test: [$(clock)] $step passed in ${secs[-1]} s"
done
summary
