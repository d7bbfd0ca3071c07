// Package sessionmodel is an exhaustive model of sessions
// (docs/contract.md §14, "Every owner, in order", and the rules of issue
// 44), in Promela, checked by Spin. It has no Go code: its test
// (model_test.go) generates the verifier with spin, compiles it with gcc
// and runs it.
package sessionmodel
