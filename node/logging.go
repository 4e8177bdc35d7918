package node

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets hashicorp/raft log through coordd's slog.Logger, so the
// node has one log story. raft's Debug and Trace lines map to slog Debug.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

func newRaftLogger(l *slog.Logger) hclog.Logger {
	return &hclogAdapter{l: l.With("component", "raft"), name: "raft"}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	for i, v := range args {
		if f, ok := v.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	a.l.Log(context.Background(), slogLevel(level), msg, args...)
}
func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *hclogAdapter) enabled(l slog.Level) bool {
	return a.l.Enabled(context.Background(), l)
}
func (a *hclogAdapter) IsTrace() bool         { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsDebug() bool         { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool          { return a.enabled(slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool          { return a.enabled(slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool         { return a.enabled(slog.LevelError) }
func (a *hclogAdapter) ImpliedArgs() []any    { return a.args }
func (a *hclogAdapter) Name() string          { return a.name }
func (a *hclogAdapter) SetLevel(hclog.Level)  {}
func (a *hclogAdapter) GetLevel() hclog.Level { return hclog.Info }
func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: a.l.With(args...), name: a.name, args: append(append([]any(nil), a.args...), args...)}
}
func (a *hclogAdapter) Named(name string) hclog.Logger {
	return a.ResetNamed(a.name + "." + name)
}
func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: a.l.With("logger", name), name: name, args: a.args}
}
func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(nil), "", 0)
}
func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.l.Info(string(trimNewline(p)))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}
