package cliargs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/urfave/cli/v2"
)

func TestIntersperse(t *testing.T) {
	app := &cli.App{
		Flags: []cli.Flag{&cli.StringFlag{Name: "batch"}, &cli.BoolFlag{Name: "quiet"}},
		Commands: []*cli.Command{{Name: "convert", Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}}, &cli.BoolFlag{Name: "force"}}}},
	}
	for _, c := range []struct{ in, want []string }{
		{[]string{"reduce", "convert", "in.npz", "-o", "out.bin"}, []string{"reduce", "convert", "-o", "out.bin", "--", "in.npz"}},
		{[]string{"reduce", "--batch", "convert", "convert", "x", "--force"}, []string{"reduce", "--batch", "convert", "convert", "--force", "--", "x"}},
		{[]string{"reduce", "convert", "a", "--", "-b"}, []string{"reduce", "convert", "--", "a", "-b"}},
		{[]string{"reduce", "--batch", "crash.bin"}, []string{"reduce", "--batch", "crash.bin"}},
		{[]string{"reduce", "convert", "--output=o.bin", "in.npz"}, []string{"reduce", "convert", "--output=o.bin", "--", "in.npz"}},
	} {
		assert.Equal(t, c.want, Intersperse(app, c.in), "%q", c.in)
	}
}
