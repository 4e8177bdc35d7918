package defaults

import (
	"testing"
	"time"
)

func TestFillSetsOnlyZeroFields(t *testing.T) {
	type config struct {
		Name    string
		Timeout time.Duration
		Max     int
		Tags    []string
		hidden  int
	}
	c := config{Name: "mine", Max: -1}
	Fill(&c, config{Name: "default", Timeout: time.Second, Max: 5, Tags: []string{"a"}, hidden: 9})
	if c.Name != "mine" || c.Timeout != time.Second || c.Max != -1 || len(c.Tags) != 1 || c.hidden != 0 {
		t.Fatalf("Fill = %+v", c)
	}
}
