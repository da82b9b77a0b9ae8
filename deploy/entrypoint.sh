#!/bin/sh
# The image's entrypoint: `tether "$@"`, after making this home a node of the installation named by
# TETHER_CLUSTER_ID, or by the file TETHER_CLUSTER_ID_FILE names, when either is set (docs/deploy.md).
# Joining again is a no-op; a home that has already run work as another installation is refused, and
# the container stops with tether's reason instead of running apart from the cluster.
set -eu
cluster="${TETHER_CLUSTER_ID:-}"
if [ -z "$cluster" ] && [ -n "${TETHER_CLUSTER_ID_FILE:-}" ]; then
    cluster="$(cat "$TETHER_CLUSTER_ID_FILE")"
fi
if [ -n "$cluster" ]; then
    tether cluster join "$cluster" >/dev/null
fi
exec tether "$@"
