// Package layering has no code: its test checks the import rules between
// coordd's layers (README, "Architecture"), so that a change that breaks
// them fails CI instead of waiting for a reader to notice.
package layering
