#!/bin/sh
# Fails with a message on stderr, as a broken reboot program would.
echo "BMC did not answer for $1" >&2
exit 3
