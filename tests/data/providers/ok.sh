#!/bin/sh
# Succeeds; records each run in $RUNS_FILE (when set) so tests can count executions.
echo "ran $1 $2 $3 node=$SLURM_HEAL_NODE action=$SLURM_HEAL_ACTION key=$SLURM_HEAL_KEY"
if [ -n "$RUNS_FILE" ]; then echo "$3" >> "$RUNS_FILE"; fi
exit 0
