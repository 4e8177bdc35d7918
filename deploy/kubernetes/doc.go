// Package kubernetes holds coordd's Kubernetes manifests (*.yaml here) and
// the test that validates them: each document decoded strictly into the
// k8s.io/api type of its kind, and the invariants of a three-node cluster
// checked. It is a module of its own so that the main module does not
// depend on k8s.io/api; scripts/test.sh runs its test.
package kubernetes
