#!/bin/sh
# Starts a child that would outlive a careless runner, then hangs.
# The child writes its pid so the test can check it was killed with the group.
sleep 300 &
echo $! > "$CHILD_PID_FILE"
sleep 300
