//! ApiVersions: what this broker implements (from `sluice_protocol::versions::SUPPORTED`).

use sluice_protocol::kafka_protocol::messages::ApiVersionsResponse;
use sluice_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use sluice_protocol::versions::SUPPORTED;

pub fn handle() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(
        SUPPORTED
            .iter()
            .map(|&(api, min, max)| {
                ApiVersion::default()
                    .with_api_key(api as i16)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    )
}

/// The answer to an ApiVersions request of a version this broker does not know: encoded as v0,
/// with UNSUPPORTED_VERSION and the supported list, so the client can pick a version.
pub fn unsupported_version() -> ApiVersionsResponse {
    handle().with_error_code(crate::errors::UNSUPPORTED_VERSION)
}
