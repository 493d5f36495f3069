//! The keys a configuration struct accepts, as its `Deserialize` derive names them: read from
//! the derive itself (serde hands a struct's field list to the deserializer), so the help, the
//! effective settings and the reference's test list every key without a list kept by hand.

use serde::Deserialize;
use serde::de::{Error as _, Visitor, value::Error};

/// The keys `T` accepts (its fields' names as the file spells them), in declaration order;
/// empty when `T` is not read as a struct.
pub fn keys_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The deserializer answers nothing: it only notes the fields the derive asks for.
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::custom("only a struct's field names are read"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        *self.0 = fields;
        self.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structs_keys_are_its_fields_as_the_file_spells_them() {
        let keys = keys_of::<super::super::Node>();
        assert_eq!(keys.first(), Some(&"stateDir"));
        for k in [
            "memlockFailClosed",
            "ipamSockets",
            "devicePlugin",
            "dra",
            "gc",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        // Written by the plugin for messages, never read from the file.
        assert!(!keys.contains(&"source"), "{keys:?}");
        assert!(keys_of::<u32>().is_empty());
    }
}
