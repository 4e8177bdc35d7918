package schedule

import (
	"testing"
	"time"
)

// The leader's tick: Due for 2,500 every-second schedules, each one
// second after the last (one occurrence to create per schedule). One op is
// one tick over all 2,500.
func BenchmarkDueTick2500(b *testing.B) {
	for _, bc := range []struct{ name, expr, tz string }{
		{"every-1s/UTC", "@every 1s", "UTC"},
		{"cron-seconds/UTC", "@seconds * * * * * *", "UTC"},
		{"every-1s/Berlin", "@every 1s", "Europe/Berlin"},
		{"cron-seconds/Berlin", "@seconds * * * * * *", "Europe/Berlin"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const n = 2500
			cals := make([]*Calendar, n)
			last := make([]int64, n)
			start := utc("2026-09-22T10:00:00Z")
			for i := range cals {
				c, err := Compile(Spec{Expr: bc.expr, TimeZone: bc.tz})
				if err != nil {
					b.Fatal(err)
				}
				cals[i], last[i] = c, start
			}
			now := start
			created := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now += 1000
				for k, c := range cals {
					d, err := c.Due(last[k], now, 24*time.Hour, 10*time.Second, 100)
					if err != nil {
						b.Fatal(err)
					}
					created += len(d.Create)
					last[k] = d.Through
				}
			}
			b.StopTimer()
			if created != b.N*n {
				b.Fatalf("created %d, want %d", created, b.N*n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/schedule")
		})
	}
}

// After a 3-day outage: the first call for an every-second schedule with a
// 1-day horizon (one HORIZON record, 1,000 created).
func BenchmarkDueAfterOutage(b *testing.B) {
	for _, bc := range []struct{ name, expr, tz string }{
		{"every-1s/UTC", "@every 1s", "UTC"},
		{"cron-seconds/Berlin", "@seconds * * * * * *", "Europe/Berlin"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, _ := Compile(Spec{Expr: bc.expr, TimeZone: bc.tz})
			last := utc("2026-09-22T10:00:00Z")
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if d, _ := c.Due(last, last+3*86400_000, 24*time.Hour, 0, 1000); len(d.Create) != 1000 {
					b.Fatal(len(d.Create))
				}
			}
		})
	}
}

// schedule get: the next 10 occurrences of a daily job in a DST zone.
func BenchmarkNext10Daily(b *testing.B) {
	c, _ := Compile(Spec{Expr: "30 2 * * *", TimeZone: "Europe/Berlin"})
	at := utc("2026-03-25T00:00:00Z")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if len(c.Next(at, 10)) != 10 {
			b.Fatal()
		}
	}
}
