// PNG through libpng, with the transformations that give PIL's convert("RGB"): palettes looked up
// (their transparency ignored), gray scaled to 8 bits and replicated, alpha dropped, 16-bit samples
// cut to their high byte (PIL's "RGB;16B" / "LA;16B" raw modes). 16-bit grayscale is refused:
// PIL opens it as a 32-bit integer image whose RGB conversion clips at 255 instead of scaling,
// which is no picture a vision model was trained on. libpng reports errors through a longjmp to
// the one frame that called setjmp; those frames hold only plain data.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "image/decoders.h"

namespace tessera::image {
namespace {

struct PngContext {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0, offset = 0;
  char message[256] = {0};
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
};

void OnError(png_structp png, png_const_charp msg) {
  auto* c = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(c->message, sizeof(c->message), "%s", msg);
  png_longjmp(png, 1);
}
void OnWarning(png_structp, png_const_charp) {}  // PIL does not fail on what libpng only warns about

void OnRead(png_structp png, png_bytep out, png_size_t n) {
  auto* c = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > c->size - c->offset) png_error(png, "the file is truncated");
  std::memcpy(out, c->data + c->offset, n);
  c->offset += n;
}

bool ReadHeader(PngContext* c) {
  if (setjmp(png_jmpbuf(c->png))) return false;
  png_set_read_fn(c->png, c, OnRead);
  png_read_info(c->png, c->info);
  png_get_IHDR(c->png, c->info, &c->width, &c->height, &c->bit_depth, &c->color_type, &c->interlace, nullptr,
               nullptr);
  return true;
}

// Sets the transformations to 8-bit RGB; false (with a message) for the refused 16-bit gray.
bool SetTransforms(PngContext* c) {
  if (setjmp(png_jmpbuf(c->png))) return false;
  const bool gray = (c->color_type & PNG_COLOR_MASK_COLOR) == 0;
  if (gray && c->bit_depth == 16) return false;
  if (c->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(c->png);
  if (gray && c->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(c->png);
  if (c->bit_depth == 16) png_set_strip_16(c->png);
  // A palette's transparency becomes an alpha channel when the palette is expanded: dropped too.
  if ((c->color_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(c->png, c->info, PNG_INFO_tRNS))
    png_set_strip_alpha(c->png);
  if (gray) png_set_gray_to_rgb(c->png);
  png_set_interlace_handling(c->png);
  png_read_update_info(c->png, c->info);
  if (png_get_rowbytes(c->png, c->info) != static_cast<size_t>(c->width) * 3) png_error(c->png, "unexpected row size");
  return true;
}

bool ReadPixels(PngContext* c, png_bytep* rows) {
  if (setjmp(png_jmpbuf(c->png))) return false;
  png_read_image(c->png, rows);
  return true;
}

// The chunks after the pixels, for an eXIf block. PIL stops quietly at a damaged or missing tail,
// so a failure here only means no EXIF.
bool ReadTail(PngContext* c, std::vector<uint8_t>* exif) {
  if (setjmp(png_jmpbuf(c->png))) return false;
  png_read_end(c->png, c->info);
#ifdef PNG_eXIf_SUPPORTED
  png_uint_32 n = 0;
  png_bytep block = nullptr;
  if (png_get_eXIf_1(c->png, c->info, &n, &block) != 0 && block != nullptr) exif->assign(block, block + n);
#endif
  return true;
}

}  // namespace

StatusOr<Image> DecodePng(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options,
                          DecodedExtras* extras) {
  PngContext c;
  c.data = data;
  c.size = size;
  c.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, OnError, OnWarning);
  if (c.png != nullptr) c.info = png_create_info_struct(c.png);
  struct Destroy {
    PngContext* c;
    ~Destroy() {
      if (c->png != nullptr) png_destroy_read_struct(&c->png, c->info != nullptr ? &c->info : nullptr, nullptr);
    }
  } destroy{&c};
  if (c.info == nullptr) return ResourceExhausted("image '" + name + "': out of memory starting libpng");
  auto corrupt = [&] { return InvalidArgument("image '" + name + "': corrupt or truncated PNG: " + c.message); };
  if (!ReadHeader(&c)) return corrupt();
  TESSERA_RETURN_IF_ERROR(CheckDeclaredSize(c.width, c.height, name, options));
  if (!SetTransforms(&c)) {
    if (c.message[0] != '\0') return corrupt();
    return InvalidArgument("image '" + name + "': 16-bit grayscale PNG is not supported (PIL clips it to 8 bits " +
                           "rather than scaling; convert it to 8 bits first)");
  }
  Image img;
  std::vector<png_bytep> rows;
  try {
    img.width = c.width;
    img.height = c.height;
    img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
    rows.resize(c.height);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("image '" + name + "': out of memory for " + std::to_string(img.width) + "x" +
                             std::to_string(img.height) + " pixels");
  }
  for (png_uint_32 y = 0; y < c.height; ++y) rows[y] = img.rgb.data() + static_cast<size_t>(y) * c.width * 3;
  if (!ReadPixels(&c, rows.data())) return corrupt();
  if (!ReadTail(&c, &extras->exif)) extras->exif.clear();
  return img;
}

}  // namespace tessera::image
