//! Errors as HTTP answers: a status and a JSON body `{"error": "..."}` whose message says what
//! to fix. 429 and 503 answers carry `Retry-After`; errors about a position in a text the
//! request sent (a trigger's rule) add `"position"`, its byte offset.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use sluice_protocol::kafka_protocol::ResponseError;

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds for `Retry-After` (429 and 503).
    pub retry_after: Option<u64>,
    /// Byte offset of the error in a text the request sent (a trigger's rule), shown as the
    /// body's `"position"`.
    pub position: Option<usize>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
            position: None,
        }
    }

    /// This error with `"position"` in its body (when `position` is `Some`).
    pub fn with_position(self, position: Option<usize>) -> ApiError {
        ApiError { position, ..self }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::CONFLICT, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    pub fn too_many(message: impl Into<String>, retry_after_secs: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after_secs),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, message)
        }
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The HTTP answer for a Kafka error code from the broker (with the broker's message).
    pub fn from_kafka(code: i16, message: impl Into<String>) -> ApiError {
        let status = match ResponseError::try_from_code(code) {
            Some(ResponseError::UnknownTopicOrPartition | ResponseError::GroupIdNotFound) => {
                StatusCode::NOT_FOUND
            }
            Some(ResponseError::TopicAlreadyExists) => StatusCode::CONFLICT,
            Some(ResponseError::OffsetOutOfRange) => StatusCode::RANGE_NOT_SATISFIABLE,
            Some(ResponseError::MessageTooLarge | ResponseError::RecordListTooLarge) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Some(
                ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::StaleMemberEpoch
                | ResponseError::FencedInstanceId
                | ResponseError::RebalanceInProgress
                | ResponseError::NonEmptyGroup
                | ResponseError::GroupSubscribedToTopic,
            ) => StatusCode::CONFLICT,
            Some(
                ResponseError::KafkaStorageError
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::NotCoordinator
                | ResponseError::CoordinatorLoadInProgress
                | ResponseError::NotEnoughReplicas,
            ) => StatusCode::SERVICE_UNAVAILABLE,
            Some(ResponseError::GroupMaxSizeReached) => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_REQUEST,
        };
        let mut e = Self::new(status, message);
        if matches!(
            status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            e.retry_after = Some(1);
        }
        e
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.position {
            None => serde_json::json!({ "error": self.message }),
            Some(position) => serde_json::json!({ "error": self.message, "position": position }),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Parses a JSON body into `T`, or a 400 that names the problem (line, column, what was
/// expected).
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; send JSON",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A body that could not be read: too large (413) or broken off (400).
pub fn body_error(rejection: axum::extract::rejection::BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(format!(
            "the request body is too large: {}",
            rejection.body_text()
        ))
    } else {
        ApiError::bad_request(format!(
            "could not read the request body: {}",
            rejection.body_text()
        ))
    }
}

/// Answer for a path no route matches.
pub async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no route for {}; see docs/http-api.md for the routes",
        uri.path()
    ))
}

/// Answer for a route asked with a method it does not have.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not accept {method}", uri.path()),
    )
}
