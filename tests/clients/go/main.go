// s3check: the client-matrix program for the AWS SDK for Go v2, at its default settings but
// for a custom endpoint and path-style addressing.
//
//	s3check write|read ENDPOINT BUCKET PREFIX DIR
//
// write puts DIR/small.bin and DIR/big.bin as PREFIX/small and PREFIX/big; read writes into
// DIR/out: big (whole GET), range (bytes 1000-2999), list (key and size per line, under
// PREFIX), head (size and ETag of PREFIX/small). Credentials from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: s3check write|read ENDPOINT BUCKET PREFIX DIR")
		os.Exit(2)
	}
	mode, endpoint, bucket, prefix, dir := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"))
	check(err)
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	})
	if mode == "write" {
		for _, name := range []string{"small", "big"} {
			f, err := os.Open(filepath.Join(dir, name+".bin"))
			check(err)
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + "/" + name), Body: f})
			check(err)
			f.Close()
		}
		return
	}
	out := filepath.Join(dir, "out")
	check(os.MkdirAll(out, 0o755))
	get := func(name, rng string) {
		in := &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(prefix + "/big")}
		if rng != "" {
			in.Range = aws.String(rng)
		}
		r, err := c.GetObject(ctx, in)
		check(err)
		b, err := io.ReadAll(r.Body)
		check(err)
		check(os.WriteFile(filepath.Join(out, name), b, 0o644))
	}
	get("big", "")
	get("range", "bytes=1000-2999")
	l, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: aws.String(prefix + "/")})
	check(err)
	var lines []string
	for _, o := range l.Contents {
		lines = append(lines, fmt.Sprintf("%s %d", *o.Key, *o.Size))
	}
	check(os.WriteFile(filepath.Join(out, "list"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(prefix + "/small")})
	check(err)
	check(os.WriteFile(filepath.Join(out, "head"), []byte(fmt.Sprintf("%d %s\n", *h.ContentLength, *h.ETag)), 0o644))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3check:", err)
		os.Exit(1)
	}
}
