//! ACLs in Apache Kafka's model: the wire enums with Kafka's codes, principals, resource
//! patterns, access-control entries, bindings and binding filters, and the validation
//! CreateAcls/DeleteAcls apply.
//!
//! Where it sits: the broker's CreateAcls/DescribeAcls/DeleteAcls handlers convert wire
//! values with `from_code` into these types at the handler edge and call the
//! [`Authorizer`] (in `authorizer`), which stores bindings durably and answers
//! `authorize(principal, host, operation, resource)` for every other request.
//!
//! Semantics follow Kafka's `StandardAuthorizer` (KRaft):
//! - a binding is a [`ResourcePattern`] (type, name, LITERAL or PREFIXED) plus an
//!   [`AccessControlEntry`] (principal string, host, operation, ALLOW or DENY);
//! - LITERAL `*` matches every name of its type; PREFIXED matches names starting with it;
//! - principal `User:*` matches every principal, host `*` every host;
//! - DENY beats ALLOW; no matching ALLOW means denied; super users are always allowed;
//! - ALL matches every operation; an ALLOW of READ, WRITE, DELETE or ALTER also allows
//!   DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS (a DENY of them
//!   does not deny DESCRIBE).
//!
//! Filters ([`AclBindingFilter`]) follow Kafka's `ResourcePatternFilter` and
//! `AccessControlEntryFilter`: ANY matches everything in its field, a `None` name/
//! principal/host matches anything, and pattern type MATCH selects every binding that
//! would apply to the given name (the literal one, the literal `*`, and prefixes of it).

mod authorizer;

pub use authorizer::{ACLS_FILE, AclIndex, Authorizer};

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{AclValidationError, AclValidationKind};

/// The resource name, host and principal name that match everything.
pub const WILDCARD: &str = "*";
/// The principal string that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The one valid name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

macro_rules! kafka_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal, $text:literal;)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Kafka's wire code.
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code,)+ }
            }

            /// The value for a wire code; UNKNOWN for codes this version does not know,
            /// as Kafka's `fromCode` does.
            pub fn from_code(code: i8) -> Self {
                match code { $($code => $name::$variant,)+ _ => $name::Unknown }
            }

            /// Kafka's name, e.g. `TRANSACTIONAL_ID`.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)+ }
            }

            /// Parses Kafka's name, ignoring ASCII case; UNKNOWN if it is none of them,
            /// as Kafka's `fromString` does.
            pub fn from_name(text: &str) -> Self {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name().eq_ignore_ascii_case(text))
                    .unwrap_or($name::Unknown)
            }

            pub fn is_unknown(self) -> bool {
                self == $name::Unknown
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum! {
    /// Kafka's `ResourceType`.
    ResourceType {
        Unknown = 0, "UNKNOWN";
        /// Filters only.
        Any = 1, "ANY";
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
}

kafka_enum! {
    /// Kafka's `PatternType`.
    PatternType {
        Unknown = 0, "UNKNOWN";
        /// Filters only: any pattern type.
        Any = 1, "ANY";
        /// Filters only: every pattern that would match the filter's name.
        Match = 2, "MATCH";
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
}

kafka_enum! {
    /// Kafka's `AclOperation`.
    AclOperation {
        Unknown = 0, "UNKNOWN";
        /// Filters only.
        Any = 1, "ANY";
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        /// Added in Kafka 4.0 (KIP-939) for TRANSACTIONAL_ID.
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
}

kafka_enum! {
    /// Kafka's `AclPermissionType`.
    AclPermissionType {
        Unknown = 0, "UNKNOWN";
        /// Filters only.
        Any = 1, "ANY";
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
}

/// An authenticated identity, written `Type:name` (`User:alice`). The type is
/// case-sensitive, as in Kafka; SASL and TLS logins produce type `User`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    pub principal_type: String,
    pub name: String,
}

impl Principal {
    /// The type every SASL login gets.
    pub const USER_TYPE: &'static str = "User";

    pub fn new(principal_type: impl Into<String>, name: impl Into<String>) -> Self {
        Principal {
            principal_type: principal_type.into(),
            name: name.into(),
        }
    }

    /// `User:name`.
    pub fn user(name: impl Into<String>) -> Self {
        Principal::new(Self::USER_TYPE, name)
    }

    /// Whether this is `User:*`, which in an ACL matches every principal.
    pub fn is_wildcard(&self) -> bool {
        self.principal_type == Self::USER_TYPE && self.name == WILDCARD
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

impl FromStr for Principal {
    type Err = AclValidationError;

    /// Splits at the first `:`; type and name must both be non-empty.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((principal_type, name)) if !principal_type.is_empty() && !name.is_empty() => {
                Ok(Principal::new(principal_type, name))
            }
            _ => Err(AclValidationError::new(
                AclValidationKind::InvalidPrincipal,
                format!("invalid principal {s:?}: expected a string of the form Type:name"),
            )),
        }
    }
}

/// Which resources a binding applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        ResourcePattern {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }
}

/// Who may (or may not) do what, from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccessControlEntry {
    /// `Type:name` as sent by the client, kept verbatim so Describe returns it unchanged.
    pub principal: String,
    /// A host address, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermissionType,
}

impl AccessControlEntry {
    pub fn new(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> Self {
        AccessControlEntry {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission,
        }
    }
}

/// One ACL: a pattern and an entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

impl AclBinding {
    pub fn new(pattern: ResourcePattern, entry: AccessControlEntry) -> Self {
        AclBinding { pattern, entry }
    }

    /// Checks this binding as Kafka's CreateAcls does, in Kafka's order; returns the
    /// parsed principal. Kafka checks, across the request parser, the broker and the
    /// controller: no UNKNOWN element; a CLUSTER resource is named `kafka-cluster`; the
    /// name is not empty; resource type, pattern type, operation and permission are
    /// concrete (not ANY, not MATCH). This crate also requires a `Type:name` principal.
    pub fn validate(&self) -> Result<Principal, AclValidationError> {
        use AclValidationKind::*;
        let p = &self.pattern;
        let e = &self.entry;
        if p.resource_type.is_unknown()
            || p.pattern_type.is_unknown()
            || e.operation.is_unknown()
            || e.permission.is_unknown()
        {
            return Err(AclValidationError::new(
                UnknownElement,
                "ACL binding contains unknown elements",
            ));
        }
        if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
            return Err(AclValidationError::new(
                InvalidClusterName,
                format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"),
            ));
        }
        if p.name.is_empty() {
            return Err(AclValidationError::new(
                EmptyResourceName,
                "Invalid empty resource name",
            ));
        }
        if p.resource_type == ResourceType::Any {
            return Err(AclValidationError::new(
                NotConcrete,
                "Invalid resourceType ANY",
            ));
        }
        if !matches!(p.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Err(AclValidationError::new(
                NotConcrete,
                format!("Invalid patternType {}", p.pattern_type),
            ));
        }
        if e.operation == AclOperation::Any {
            return Err(AclValidationError::new(
                NotConcrete,
                "Invalid operation ANY",
            ));
        }
        if e.permission == AclPermissionType::Any {
            return Err(AclValidationError::new(
                NotConcrete,
                "Invalid permissionType ANY",
            ));
        }
        e.principal.parse()
    }
}

/// Selects resource patterns (Kafka's `ResourcePatternFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourcePatternFilter {
    /// ANY, or the one type to match.
    pub resource_type: ResourceType,
    /// `None` matches any name.
    pub name: Option<String>,
    /// ANY, MATCH, or the one pattern type to match.
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    pub fn new(resource_type: ResourceType, name: Option<&str>, pattern_type: PatternType) -> Self {
        ResourcePatternFilter {
            resource_type,
            name: name.map(str::to_owned),
            pattern_type,
        }
    }

    /// Matches every pattern.
    pub fn any() -> Self {
        Self::new(ResourceType::Any, None, PatternType::Any)
    }

    pub fn is_unknown(&self) -> bool {
        self.resource_type.is_unknown() || self.pattern_type.is_unknown()
    }

    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != pattern.pattern_type
        {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern.pattern_type {
            return *name == pattern.name;
        }
        // MATCH: would this pattern apply to a resource called `name`?
        match pattern.pattern_type {
            PatternType::Literal => *name == pattern.name || pattern.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&pattern.name),
            _ => false,
        }
    }
}

/// Selects entries (Kafka's `AccessControlEntryFilter`). Principal and host compare as
/// exact strings: a filter for `User:alice` does not select a `User:*` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessControlEntryFilter {
    /// `None` matches any principal.
    pub principal: Option<String>,
    /// `None` matches any host.
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission: AclPermissionType,
}

impl AccessControlEntryFilter {
    pub fn new(
        principal: Option<&str>,
        host: Option<&str>,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> Self {
        AccessControlEntryFilter {
            principal: principal.map(str::to_owned),
            host: host.map(str::to_owned),
            operation,
            permission,
        }
    }

    /// Matches every entry.
    pub fn any() -> Self {
        Self::new(None, None, AclOperation::Any, AclPermissionType::Any)
    }

    pub fn is_unknown(&self) -> bool {
        self.operation.is_unknown() || self.permission.is_unknown()
    }

    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| *p == entry.principal)
            && self.host.as_ref().is_none_or(|h| *h == entry.host)
            && (self.operation == AclOperation::Any || self.operation == entry.operation)
            && (self.permission == AclPermissionType::Any || self.permission == entry.permission)
    }
}

/// Selects bindings, for DescribeAcls and DeleteAcls.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    pub pattern: ResourcePatternFilter,
    pub entry: AccessControlEntryFilter,
}

impl AclBindingFilter {
    pub fn new(pattern: ResourcePatternFilter, entry: AccessControlEntryFilter) -> Self {
        AclBindingFilter { pattern, entry }
    }

    /// Matches every binding.
    pub fn any() -> Self {
        Self::new(
            ResourcePatternFilter::any(),
            AccessControlEntryFilter::any(),
        )
    }

    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern.matches(&binding.pattern) && self.entry.matches(&binding.entry)
    }

    /// Kafka refuses a filter with an UNKNOWN element (`INVALID_REQUEST`).
    pub fn validate(&self) -> Result<(), AclValidationError> {
        if self.pattern.is_unknown() {
            return Err(AclValidationError::new(
                AclValidationKind::UnknownElement,
                "Unknown patternFilter.",
            ));
        }
        if self.entry.is_unknown() {
            return Err(AclValidationError::new(
                AclValidationKind::UnknownElement,
                "Unknown entryFilter.",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
