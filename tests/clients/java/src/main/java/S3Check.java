import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.HeadObjectResponse;
import software.amazon.awssdk.services.s3.model.S3Object;

/**
 * The client-matrix program for the AWS SDK for Java v2, at its default settings but for a
 * custom endpoint and path-style addressing (over plain HTTP it signs PUT bodies in chunks
 * with a signed checksum trailer).
 *
 * <pre>S3Check write|read ENDPOINT BUCKET PREFIX DIR</pre>
 *
 * write puts DIR/small.bin and DIR/big.bin as PREFIX/small and PREFIX/big; read writes into
 * DIR/out: big (whole GET), range (bytes 1000-2999), list (key and size per line), head (size
 * and ETag of PREFIX/small). Credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
 */
public final class S3Check {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: S3Check write|read ENDPOINT BUCKET PREFIX DIR");
            System.exit(2);
        }
        String mode = args[0], bucket = args[2], prefix = args[3];
        Path dir = Path.of(args[4]);
        try (S3Client c = S3Client.builder()
                .endpointOverride(URI.create(args[1]))
                .region(Region.US_EAST_1)
                .forcePathStyle(true)
                .build()) {
            if (mode.equals("write")) {
                for (String name : List.of("small", "big")) {
                    c.putObject(b -> b.bucket(bucket).key(prefix + "/" + name),
                            RequestBody.fromFile(dir.resolve(name + ".bin")));
                }
                return;
            }
            Path out = Files.createDirectories(dir.resolve("out"));
            Files.write(out.resolve("big"), c.getObjectAsBytes(
                    GetObjectRequest.builder().bucket(bucket).key(prefix + "/big").build()).asByteArray());
            Files.write(out.resolve("range"), c.getObjectAsBytes(GetObjectRequest.builder()
                    .bucket(bucket).key(prefix + "/big").range("bytes=1000-2999").build()).asByteArray());
            List<String> lines = new ArrayList<>();
            for (S3Object o : c.listObjectsV2(b -> b.bucket(bucket).prefix(prefix + "/")).contents()) {
                lines.add(o.key() + " " + o.size());
            }
            Files.writeString(out.resolve("list"), String.join("\n", lines) + "\n");
            HeadObjectResponse h = c.headObject(b -> b.bucket(bucket).key(prefix + "/small"));
            Files.writeString(out.resolve("head"), h.contentLength() + " " + h.eTag() + "\n");
        }
    }
}
