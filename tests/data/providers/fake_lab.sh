#!/bin/sh
# Stands in for contrib/lab/lab in unit tests: records its argv in $LAB_LOG.
echo "$*" >> "$LAB_LOG"
