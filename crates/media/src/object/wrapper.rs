//! [`wrapping_store!`]: the `ObjectStore` impl of a test store that wraps
//! another (its field `inner`): the wrapper writes the requests it models
//! (PUT, GET, DELETE, LIST, …) and the macro adds the ones it passes on
//! unchanged — listing by delimiter, copies and renames, which the tier
//! never sends, so neither wrapper models them.

/// `wrapping_store!(Type { async fn put_opts(…) … })`: `impl ObjectStore
/// for Type` with the methods given, plus `list_with_delimiter`,
/// `copy_opts` and `rename_opts` passed on to `self.inner`.
macro_rules! wrapping_store {
    ($store:ty { $($methods:tt)* }) => {
        #[::async_trait::async_trait]
        impl ::object_store::ObjectStore for $store {
            $($methods)*

            async fn list_with_delimiter(
                &self,
                prefix: Option<&::object_store::path::Path>,
            ) -> ::object_store::Result<::object_store::ListResult> {
                self.inner.list_with_delimiter(prefix).await
            }

            async fn copy_opts(
                &self,
                from: &::object_store::path::Path,
                to: &::object_store::path::Path,
                options: ::object_store::CopyOptions,
            ) -> ::object_store::Result<()> {
                self.inner.copy_opts(from, to, options).await
            }

            async fn rename_opts(
                &self,
                from: &::object_store::path::Path,
                to: &::object_store::path::Path,
                options: ::object_store::RenameOptions,
            ) -> ::object_store::Result<()> {
                self.inner.rename_opts(from, to, options).await
            }
        }
    };
}

pub(super) use wrapping_store;
