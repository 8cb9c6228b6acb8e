//! The tests of `audit` of files, wheels, directories, environments and images, its JSON and text,
//! against cuobjdump.

mod bom;
mod collections;
mod compilers;
mod cuobjdump_oracle;
mod diff;
mod driver;
mod embedded;
pub(crate) mod fixtures;
mod headline;
mod here;
mod images;
mod images_generated;
mod installed;
mod lock;
mod nvidia_libraries;
mod profiles;
mod ptx_text;
mod stubs;
mod stubs_printf;
mod tile_ir;
mod wheel;
mod windows;
