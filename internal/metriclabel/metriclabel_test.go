package metriclabel

import "testing"

func TestValue(t *testing.T) {
	for _, c := range []struct {
		name     string
		prefixes []string
		want     string
	}{
		{"COMMAND_TYPE_ACQUIRE", []string{"COMMAND_TYPE_"}, "acquire"},
		{"COMMAND_TYPE_SUBMIT_JOBS", []string{"COMMAND_TYPE_"}, "submit_jobs"},
		{"LEASE_EXPIRED", []string{"LEASE_"}, "expired"},
		{"IDENTITY_MISMATCH", []string{"LEASE_"}, "identity_mismatch"},
		{"WATCH_INDEX_COMPACTED", []string{"WATCH_"}, "index_compacted"},
		{"WATCHER_TOO_SLOW", []string{"WATCH_"}, "watcher_too_slow"},
		{"LEASE_", []string{"LEASE_"}, "lease_"}, // never empty
		{"STALE_TOKEN", nil, "stale_token"},
		{"Follower", nil, "follower"},
		{"HeldTooLong", nil, "held_too_long"},
		{"DST_GAP", nil, "dst_gap"},
		{"expired", []string{"LEASE_"}, "expired"},
		{"lease_lost", []string{"LEASE_"}, "lost"},
	} {
		if got := Value(c.name, c.prefixes...); got != c.want {
			t.Errorf("Value(%q, %q) = %q, want %q", c.name, c.prefixes, got, c.want)
		}
	}
}
